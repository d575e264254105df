"""specviz.teaching.lab: the lab-end cell stops a student's Run All with a message and no
traceback, and with SPECVIZ_LAB=0 says one line and lets the notebook run on.

(That JupyterLab's Run All really stops there is checked in a browser: tests/test_jupyter_browser.py.)"""

import pytest

from specviz.teaching import lab

WANTED = ("The lab ends here. The sections below are homework: click the next cell and use "
          "Run > Run Selected Cell and All Below.")


@pytest.mark.parametrize("value", [None, "", "1"])
def test_in_class_it_stops_with_the_message_alone(value, monkeypatch):
    if value is None:
        monkeypatch.delenv(lab.ENV, raising=False)
    else:
        monkeypatch.setenv(lab.ENV, value)
    with pytest.raises(lab.LabEnd) as raised:
        lab.lab_ends_here()
    shown = raised.value._render_traceback_()
    assert shown[0] == WANTED
    assert shown == list(lab.MESSAGE) and len(shown) == 2 and "Kernel > Shut Down Kernel" in shown[1]


def test_with_the_switch_off_it_says_one_line_and_returns(monkeypatch, capsys):
    monkeypatch.setenv(lab.ENV, "0")
    assert lab.lab_ends_here() is None
    assert capsys.readouterr().out == lab.GOING_ON + "\n"


def test_a_mistyped_setting_stops_and_names_the_values(monkeypatch):
    monkeypatch.setenv(lab.ENV, "off")
    with pytest.raises(lab.LabEnd) as raised:
        lab.lab_ends_here()
    shown = raised.value._render_traceback_()
    assert shown[0] == WANTED and "SPECVIZ_LAB is 'off'" in shown[1] and "set it to 0" in shown[1]


def test_a_kernel_shows_the_message_and_no_traceback(monkeypatch, tmp_path):
    """In a real IPython kernel the error output is the message's lines and nothing else: no
    'Traceback', no file or line of specviz's code."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.manager import KernelManager

    monkeypatch.delenv(lab.ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from specviz.teaching.lab import lab_ends_here\n\nlab_ends_here()")])
    km = KernelManager(kernel_name="python3", transport="ipc", connection_file=str(tmp_path / "kernel.json"))
    client = nbclient.NotebookClient(nb, km=km, timeout=60, kernel_name="python3", allow_errors=True)
    client.execute(cleanup_kc=True)
    (error,) = nb.cells[0].outputs
    assert error.output_type == "error" and error.ename == "LabEnd"
    assert error.traceback == list(lab.MESSAGE)
