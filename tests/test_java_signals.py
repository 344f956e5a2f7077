"""An in-process JVM (Pyserini) keeps its fault handlers through Lightning runs.

HotSpot's safepoint polls fault on purpose and its SIGSEGV handler resumes them; Lightning's Trainer restores every
signal's Python-level handler at teardown, which resets that handler to the default, so the next poll killed the
process ("ForkJoinPool... segfault" in the kernel log, no crash report). Checked in subprocesses, since a process
whose handler was reset may die at any later safepoint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import ctypes, signal, sys
import torch, lightning as L
from spar.core.java import _sigaction_type, jvm_signal_handlers_kept, start_jvm

ctypes, Sigaction = _sigaction_type()
libc = ctypes.CDLL(None)

class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                ("saddr", ctypes.c_void_p)]

def segv_handler_library():
    action, info = Sigaction(), DlInfo()
    libc.sigaction(int(signal.SIGSEGV), None, ctypes.byref(action))
    if not action.handler or not libc.dladdr(ctypes.c_void_p(action.handler), ctypes.byref(info)):
        return "default"
    return info.fname.decode().rsplit("/", 1)[-1]

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, index):
        return self.layer(batch[0]).sum()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), 0.1)

start_jvm()
print("jvm", segv_handler_library())
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
trainer = L.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                    enable_model_summary=False)
if sys.argv[1] == "kept":
    with jvm_signal_handlers_kept():
        trainer.fit(Tiny(), data)
else:
    trainer.fit(Tiny(), data)
print("after", segv_handler_library(), flush=True)
"""


def _handlers(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    return [line for line in done.stdout.splitlines() if line.startswith(("jvm ", "after "))]


@pytest.mark.slow  # two processes that start the JVM and train with Lightning: ~2 min
def test_lightning_resets_the_jvm_handler_and_spar_keeps_it():
    assert _handlers("plain") == ["jvm libjvm.so", "after default"]  # Lightning's teardown, unguarded
    assert _handlers("kept") == ["jvm libjvm.so", "after libjvm.so"]
