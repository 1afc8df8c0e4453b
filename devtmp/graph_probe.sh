export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m commtrace build-native 2>&1 | tail -3
python3 - <<'PY'
import torch
torch.cuda.set_device(0)
x = torch.ones(4, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    x.mul_(2)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    print("inside capture: _cuda_isCurrentStreamCapturing =", torch._C._cuda_isCurrentStreamCapturing(), torch.cuda.is_current_stream_capturing())
    x.mul_(2)
PY
rm -rf /tmp/gp; python3 -m commtrace run -o /tmp/gp tests/gpu/worker_cuda.py graph /tmp/gp.json 29511 2>&1 | tail -3; cat /tmp/gp.json
python3 - <<'PY'
import commtrace
df = commtrace.load("/tmp/gp")
cols = [c for c in ("op", "variant", "seq", "t_start_ns", "t_end_ns", "end_observed", "status", "callsite", "device", "phase") if c in df.columns]
print(df[cols].to_string())
PY
