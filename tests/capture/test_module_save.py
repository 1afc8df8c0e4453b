"""torch.save / copy.deepcopy of a whole model behave as untraced once the module tracker
is on (a DeviceMesh exists), also with a module that has forward hooks of its own: the saved
file names nothing of commtrace, and loads where commtrace cannot be imported; a module whose
own hooks were removed keeps none of commtrace's after its next forward."""
from __future__ import annotations

import json

import helpers as h
from helpers import worker

# Loads OUT.pt and OUT.pkl with commtrace made unimportable, prints the outputs on the worker's input.
LOAD = """
import json, pickle, sys
for name in ("commtrace", "commtrace.capture", "commtrace.capture.module_tracker"):
    sys.modules[name] = None
import torch
def own_hook(module, args, output):  # the saved model's own hook (pickled by name)
    return None
out = sys.argv[1]
x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
model = torch.load(out + ".pt", weights_only=False)
with open(out + ".pkl", "rb") as f:
    twin = pickle.load(f)
print(json.dumps({"y": model(x).tolist(), "y_twin": twin(x).tolist(),
                  "hooks": sum(len(m._forward_hooks) for m in [*model.modules(), *twin.modules()])}))
"""


def test_whole_model_save_and_deepcopy_behave_as_untraced(tmp_path):
    out = tmp_path / "model"
    h.run(h.commtrace_cmd(tmp_path / "run", worker("save_model.py"), h.free_port(), out), timeout=200,
          env=h.clean_env()).check(0)
    df = h.load(tmp_path / "run")
    assert list(df["module"].astype(str)) == ["Probe"]  # the tracker was on (a mesh was built)
    saved = json.loads((tmp_path / "model.json").read_text())
    assert saved["twin_hooks"] == 1 and saved["y"] == saved["y_twin"]  # the program's own hook only
    assert saved["released_hooks"] == 0  # its own hook removed, the module carries none of ours
    for suffix in (".pt", ".pkl"):
        assert b"commtrace" not in (tmp_path / f"model{suffix}").read_bytes()
    res = h.run([h.PY, "-c", LOAD, out], timeout=120, env=h.clean_env()).check(0)
    loaded = json.loads(res.stdout)
    assert loaded == {"y": saved["y"], "y_twin": saved["y"], "hooks": 2}
