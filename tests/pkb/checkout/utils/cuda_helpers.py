"""What solutions import from the checkout (PKB's hold its load_inline wrapper)."""


def summed(x):
    import torch.distributed as dist

    out = x.clone()
    dist.all_reduce(out)
    return out
