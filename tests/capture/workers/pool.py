"""A multiprocessing Pool (spawn context) whose workers the with-block ends by
SIGTERM (Pool.terminate), as every such program does. The workers import torch
(re-importing this script as __mp_main__), as in a training script: tracing is
fully on in them."""
import multiprocessing

import torch  # noqa: F401


def square(x):
    return x * x


if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        print(pool.map(square, [1, 2, 3]), flush=True)
