"""Shared fixtures. Tests never touch the network: the hub is forced offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny():
    from specviz import load_pair

    return load_pair("tiny")
