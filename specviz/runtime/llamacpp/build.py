"""Build llama.cpp from source: `python -m specviz llamacpp install` (`make llamacpp`).

llama.cpp reaches PyPI only as source: llama-cpp-python's source package vendors it. This
downloads that package (pinned by version and sha256), builds the vendored llama.cpp with
CMake for this CPU (GGML_NATIVE), the shared libraries and `llama-server`, into
`specviz.runtime.llamacpp.runner.home()`, then installs the Python binding from the same package without
building it a second time (LLAMA_BUILD=OFF); `specviz.runtime.llamacpp.runner.binding()` points it at the
libraries built here. Nothing prebuilt is downloaded. It needs a C/C++ compiler (Debian's
build-essential, Xcode's command-line tools, or Visual Studio's C++ workload); CMake comes from
PyPI when none is on PATH. A build already in place is kept (--force builds again) when it was
built from the same package with the same patches.

Before compiling, the patches in `patches/` (git format-patch files, each saying what it changes
and why) are applied to the vendored source; the build record names each with its sha256, and a
build without them is built again. Today one: Qwen2's graph hands out its layer inputs, which
EAGLE-3 and DFlash drafters read (llama.cpp's own and specviz's, specviz.runtime.llamacpp.runner).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from specviz.argparsing import Parser
from specviz.errors import SpecvizError, run_command
from specviz.runtime.llamacpp.runner import STAMP, VERSION, home

PACKAGE = "llama-cpp-python"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # llama_cpp_python-0.3.36.tar.gz
TARGETS = ("llama", "llama-server")
PATCHES = Path(__file__).with_name("patches")  # *.patch, applied in name order


class BuildError(SpecvizError):
    """A step of the build failed; the message names the step and its log."""


def say(message: str) -> None:
    print(f"[specviz llama.cpp] {message}", file=sys.stderr, flush=True)


def install(force: bool = False, jobs: int = 0) -> Path:
    """Build llama.cpp into home() unless a whole build of VERSION is there, then install the
    binding. Returns home()."""
    dest = home()
    stamp = dest / STAMP
    built = stamp.exists() and stamp.read_text().startswith(_record_head())
    with tempfile.TemporaryDirectory(prefix="specviz-llamacpp-") as work:
        work = Path(work)
        sdist = _download(work)
        if built and not force:
            say(f"llama.cpp {VERSION} is already built in {dest} (--force builds it again)")
        else:
            _build(sdist, work, dest, jobs or os.cpu_count() or 2)
        _install_binding(sdist, work)
    return dest


def _run(cmd: list, log: Path, what: str, env=None) -> None:
    start = time.time()
    with open(log, "ab") as out:
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        raise BuildError(f"{what} failed (exit {code}); the last lines of its log are above, the whole log is {log}.")
    say(f"{what}: done in {time.time() - start:.0f} s")


def _download(work: Path) -> Path:
    say(f"downloading the {PACKAGE} {VERSION} source package from PyPI (75 MB)")
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
          f"{PACKAGE}=={VERSION}", "-d", str(work)], work / "download.log", "download")
    [sdist] = work.glob("llama_cpp_python-*.tar.gz")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SHA256:
        raise BuildError(f"{sdist.name} has sha256 {digest}, not the pinned {SHA256}: not building it.")
    return sdist


def _cmake() -> str:
    found = shutil.which("cmake")
    if found:
        return found
    say("no cmake on PATH: installing it from PyPI into this environment")
    _run([sys.executable, "-m", "pip", "install", "-q", "cmake"], Path(tempfile.gettempdir()) / "specviz-cmake.log",
         "installing cmake")
    return shutil.which("cmake") or str(Path(sys.executable).parent / "cmake")


def _build(sdist: Path, work: Path, dest: Path, jobs: int) -> None:
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    source = next(work.glob("llama_cpp_python-*")) / "vendor" / "llama.cpp"
    for patch in patches():
        apply_patch(patch, source)
        say(f"applied {patch.name}")
    build, log = work / "build", dest.parent / "llama.cpp-build.log"
    dest.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    cmake = _cmake()
    say(f"configuring llama.cpp for this CPU (log: {log})")
    _run([cmake, "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON",
          "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
          "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
          "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON", *_no_amx(), *_unity(cmake, work)], log, "configure")
    say(f"compiling {', '.join(TARGETS)} with {jobs} jobs (a few minutes on 2 cores)")
    _run([cmake, "--build", str(build), "--config", "Release", "-j", str(jobs), "--target", *TARGETS], log, "compile")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    outputs = [p for p in (build / "bin").rglob("*") if p.is_file() or p.is_symlink()]
    for path in outputs:  # shared libraries and llama-server side by side: the server finds them by $ORIGIN
        target = dest / path.name
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, target)
    (dest / STAMP).write_text(_record_head() + f"built {time.strftime('%Y-%m-%d %H:%M:%S')} for this CPU (GGML_NATIVE)\n")
    say(f"built into {dest}")


def patches() -> list:
    return sorted(PATCHES.glob("*.patch"))


def _record_head() -> str:
    """The build record's first lines: the package, its digest and every patch applied (with its
    digest). A build whose record starts otherwise is built again."""
    lines = [f"{PACKAGE} {VERSION}", f"sha256 {SHA256}"]
    lines += [f"patch {p.name} sha256 {hashlib.sha256(p.read_bytes()).hexdigest()}" for p in patches()]
    return "\n".join(lines) + "\n"


def apply_patch(patch: Path, root: Path) -> None:
    """Apply a unified diff (a git format-patch file) to the tree at `root`: every hunk's context
    and removed lines must be found where the hunk says (a few lines off is allowed, as `patch`
    does), else BuildError. No `patch` or `git` program is needed (Windows has neither)."""
    text = patch.read_text()
    files = text.split("\n--- a/")[1:]
    if not files:
        raise BuildError(f"{patch.name} holds no diff.")
    for chunk in files:
        header, _, body = chunk.partition("\n+++ b/")
        path = root / header.strip()
        lines = path.read_text().split("\n")
        hunks = ("\n" + body).split("\n@@ ")[1:]
        offset = 0
        for hunk in hunks:
            head, _, rest = hunk.partition("\n")
            start = int(head.split()[0].lstrip("-").split(",")[0]) - 1 + offset
            old, new = [], []
            for line in rest.split("\n"):
                if line.startswith("diff --git") or line.startswith("-- "):
                    break
                tag, content = (line[:1], line[1:]) if line else (" ", "")
                if tag in " -":
                    old.append(content)
                if tag in " +":
                    new.append(content)
            while old and new and old[-1] == "" and new[-1] == "":  # the split's trailing empty line
                old.pop(), new.pop()
            at = next((start + d for d in (0, -1, 1, -2, 2, -3, 3) if lines[start + d:start + d + len(old)] == old), None)
            if at is None:
                raise BuildError(f"{patch.name} does not apply to {header.strip()} near line {start + 1}: "
                                 "the vendored llama.cpp is not the one it was written for.")
            lines[at:at + len(old)] = new
            offset += len(new) - len(old)
        path.write_text("\n".join(lines))


def _no_amx() -> list:
    """On x86-64, compile llama.cpp's AMX kernels out: on AMX CPUs (Xeon Sapphire Rapids and
    later) its AMX matrix product segfaults on the first Q4_K_M decode (llama.cpp issue 20824,
    seen here on this pair's files); its AVX-512 and AVX2 kernels run instead. MSVC has no AMX."""
    if platform.machine().lower() not in ("x86_64", "amd64") or os.name == "nt":
        return []
    flags = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    return [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]


# Three of llama.cpp's sources do not compile inside a unity unit (two mtmd helpers refuse the
# internal headers their neighbours include; common/json.cpp specialises a template its
# neighbours have already instantiated): they stay translation units of their own. Deferred to
# the end of the top directory, when the targets that list them exist; nothing of llama.cpp's
# own files is edited.
UNITY_EXCEPTIONS = """\
include_guard(GLOBAL)
function(_specviz_unity_exceptions)
  set(root "${CMAKE_SOURCE_DIR}")
  set_source_files_properties("${root}/tools/mtmd/mtmd-helper.cpp" "${root}/tools/mtmd/mtmd-helper-gen.cpp"
    DIRECTORY "${root}/tools/mtmd" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  set_source_files_properties("${root}/common/json.cpp"
    DIRECTORY "${root}/common" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specviz_unity_exceptions)
# The server (its slots, HTTP and JSON), the shared helpers and the multimodal library do no
# per-token work that shows: compiled at -O1 (appended after Release's -O3, so it wins) they build
# much faster and llama-server decodes as fast (docs/llamacpp.md). libllama and ggml, where tokens
# are computed, keep -O3.
function(_specviz_light_targets)
  foreach(target llama-common mtmd llama-server-impl llama-server server-context cpp-httplib)
    if(TARGET ${target})
      set_property(TARGET ${target} APPEND PROPERTY COMPILE_OPTIONS -O1)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specviz_light_targets)
"""


def _unity(cmake: str, work: Path) -> list:
    """A unity (jumbo) build: CMake compiles batches of sources as one translation unit, so the
    shared headers are parsed once a batch. On 2 cores that cut the compile by about a fifth
    (the same sources, flags and targets); the same include compiles the targets off the decoding
    path at -O1, a further cut (docs/llamacpp.md). Needs CMake 3.19 (cmake_language DEFER); not
    on Windows, where MSVC's build was not tried this way."""
    if os.name == "nt":
        return []
    try:
        line = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout.split()[2]
        if tuple(int(x) for x in line.split(".")[:2]) < (3, 19):
            return []
    except (OSError, IndexError, ValueError):
        return []
    include = work / "specviz-unity.cmake"
    include.write_text(UNITY_EXCEPTIONS)
    return ["-DCMAKE_UNITY_BUILD=ON", f"-DCMAKE_PROJECT_INCLUDE={include}"]


def _install_binding(sdist: Path, work: Path) -> None:
    env = dict(os.environ, CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF")  # the library is the one built above
    say(f"installing the Python binding {PACKAGE} {VERSION} (no second build)")
    _run([sys.executable, "-m", "pip", "install", "-q", str(sdist)], work / "binding.log", "installing the binding",
         env=env)


def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz llamacpp",
                    description="Build llama.cpp from PyPI's source package and install its binding.")
    parser.add_argument("action", choices=["install"], help="install: build llama.cpp here (once) and its binding")
    parser.add_argument("--force", action="store_true", help="build again even if a build is in place")
    parser.add_argument("--jobs", type=int, default=0, help="compile jobs (default: one per CPU)")
    args = parser.parse_args(argv)

    def body() -> int:
        where = install(args.force, args.jobs)
        say(f"ready: llama.cpp in {where}; specviz runs it with load_pair(..., backend='llama.cpp')")
        return 0

    return run_command(body, "interrupted; a build is used only once whole: the same command downloads the source "
                             "again and builds unless a whole build is in place (--force: always)")
