"""TorchScript compiles a function calling ``torch.distributed.autograd.backward`` (as torch's
JitDistAutogradTest does) after a process group exists (commtrace's phase hooks installed).

``scripted_dist_backward.py``: prints ``scripted <graph names dist_backward>``.
"""
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.autograd as dist_autograd

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.FileStore(tempfile.mktemp(), 1))


@torch.jit.script
def dist_backward_script(context_id: int, loss: torch.Tensor):
    dist_autograd.backward(context_id, [loss])


print("scripted", "dist_backward" in str(dist_backward_script.graph), flush=True)
dist.destroy_process_group()
