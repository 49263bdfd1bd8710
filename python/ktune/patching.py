"""ktune.patch(model): torch modules swapped in place for ktune.nn's.

A swap changes the module's class to its ktune.nn subclass (which adds only
a forward): parameters, buffers, hooks, tied weights, state_dict keys and the
optimizer's references stay exactly as they were.  Only modules whose type is
exactly torch's are swapped; a subclass (a LoRA or quantised Linear, say) has
its own forward and is kept."""
from dataclasses import dataclass, field

import torch

from . import nn as knn


def _table():
    t = {torch.nn.Linear: knn.Linear, torch.nn.LayerNorm: knn.LayerNorm, torch.nn.GELU: knn.GELU,
         torch.nn.CrossEntropyLoss: knn.CrossEntropyLoss}
    if knn.RMSNorm is not None:
        t[torch.nn.RMSNorm] = knn.RMSNorm
    return t


@dataclass
class PatchReport:
    swapped: list = field(default_factory=list)  # (name, torch class name)
    kept: list = field(default_factory=list)  # (name, class name, reason): near misses only

    def __str__(self):
        lines = [f"ktune.patch: {len(self.swapped)} modules swapped"]
        counts = {}
        for _, cls in self.swapped:
            counts[cls] = counts.get(cls, 0) + 1
        lines += [f"  {cls}: {n}" for cls, n in sorted(counts.items())]
        lines += [f"  kept {name} ({cls}): {why}" for name, cls, why in self.kept]
        return "\n".join(lines)


def patch(model):
    """Swaps every torch.nn.Linear, LayerNorm, RMSNorm, GELU and
    CrossEntropyLoss of `model` (the model itself included) for its ktune.nn
    subclass, in place, and returns a PatchReport of what was swapped and of
    the subclasses kept.  Calling it again swaps nothing more.  Attention has
    no torch module to swap (F.scaled_dot_product_attention is a function):
    ktune.nn.ScaledDotProductAttention stands in where a model calls it
    through an attribute, as examples/gpt2 does."""
    table = _table()
    rep = PatchReport()
    for name, m in model.named_modules():
        cls = type(m)
        if cls in table:
            m.__class__ = table[cls]
            rep.swapped.append((name or "(model)", cls.__name__))
            continue
        for base in table:
            if isinstance(m, base) and not isinstance(m, tuple(table.values())):
                rep.kept.append((name or "(model)", cls.__name__,
                                 f"a subclass of torch.nn.{base.__name__} with its own forward"))
    return rep
