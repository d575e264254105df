"""The Chromium the real-browser tests drive: $BROWSER_PATH where set (as the static-image check
reads it, specviz.render.notebook.browser_path), else Debian's /usr/bin/chromium."""

import os

import pytest

PATH = os.environ.get("BROWSER_PATH") or "/usr/bin/chromium"


def require() -> str:
    """The browser's path; skips the calling test module when it is not an executable file."""
    if not (os.path.isfile(PATH) and os.access(PATH, os.X_OK)):
        pytest.skip(f"{PATH} is missing (apt-get install chromium, or set BROWSER_PATH to a Chrome/Chromium)",
                    allow_module_level=True)
    return PATH
