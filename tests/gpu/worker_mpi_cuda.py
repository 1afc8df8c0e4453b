"""``mpirun -n 2 python worker_mpi_cuda.py``: the mpi4py backend with a CUDA tensor
either works (CUDA-aware MPI) or fails with the documented one-line error."""
import torch
import torch.distributed as dist

import commtrace.mpi

commtrace.mpi.install()
dist.init_process_group("mpi")
t = torch.ones(4, device="cuda:0")
try:
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"rank {dist.get_rank()}: cuda-aware: all_reduce gave {t.tolist()}")
except RuntimeError as e:
    print(f"rank {dist.get_rank()}: refused: {e}")
dist.destroy_process_group()
