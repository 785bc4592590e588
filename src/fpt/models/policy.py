"""Parameter groups and freeze policies: which parameters train.

Every parameter of a model is put in exactly one group: input, output, layernorm, position,
attention (last-attention for the last block's, so it can be trained alone) or feedforward, by
its family's rules (fpt.backbones.families); a parameter no rule claims falls back to its module's type.
A parameter that nothing classifies is an error that lists it: fpt never freezes (or trains)
something silently. A policy is a named set of trained groups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from torch import nn

from fpt.backbones.families import group_by_module_type, group_rules
from fpt.core.choices import GROUPS, POLICIES
from fpt.core.errors import FptError


def classify_backbone(backbone: nn.Module, family: str) -> dict[str, str]:
    """Map every parameter name of a backbone to its group, or raise listing the unclassified."""
    owners = {}
    for module_name, module in backbone.named_modules():
        for param_name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            owners[full] = (module, module_name, param_name)
    names = [name for name, _ in backbone.named_parameters()]
    return classify_names(names, family, lambda name: group_by_module_type(*owners[name]))


def classify_names(
    names: Iterable[str], family: str, fallback: Callable[[str], str | None] | None = None
) -> dict[str, str]:
    """Map parameter names to groups by the family's rules, `fallback(name)` placing those no rule
    claims (the built body's module types: `classify_backbone`), the last block's attention moved
    to last-attention; raise listing the names nothing places."""
    rules = group_rules(family)
    groups, unclassified = {}, []
    for name in names:
        group = next((g for g, rx in rules if rx.search(name)), None)
        if group is None and fallback is not None:
            group = fallback(name)
        if group is None:
            unclassified.append(name)
        else:
            groups[name] = group
    _split_last_attention(groups)
    if unclassified:
        shown = ", ".join(unclassified[:8]) + (" ..." if len(unclassified) > 8 else "")
        raise FptError(
            f"{len(unclassified)} parameters of this {family!r} backbone fit no group ({shown}); "
            f"add a Family for {family!r} to fpt.backbones.families.FAMILIES"
        )
    return groups


def _split_last_attention(groups: dict[str, str]) -> None:
    """Move the attention parameters of the last block (the highest block number) to last-attention."""
    block = {
        name: int(m.group(1))
        for name, group in groups.items()
        if group == "attention" and (m := re.search(r"(?:^|\.)(\d+)\.", name))
    }
    if block:
        last = max(block.values())
        for name, index in block.items():
            if index == last:
                groups[name] = "last-attention"


def parse_policy(policy: str) -> frozenset[str]:
    """A policy name (fpt, full, output-only, ...) or a comma list of groups -> trained groups."""
    if policy in POLICIES:
        return POLICIES[policy]
    groups = {g.strip() for g in policy.split(",") if g.strip()}
    unknown = sorted(groups - set(GROUPS))
    if not groups or unknown:
        raise FptError(
            f"unknown policy or group {', '.join(unknown) or policy!r}: use a policy "
            f"({', '.join(POLICIES)}) or a comma list of groups ({', '.join(GROUPS)})"
        )
    if "attention" in groups:  # "attention" means every block's
        groups.add("last-attention")
    return frozenset(groups)


@dataclass
class GroupRow:
    """One row of `fpt info`'s table: a parameter group, its parameter count, whether the policy trains it."""

    group: str
    params: int
    trained: bool


def apply_policy(param_groups: dict[str, str], model: nn.Module, trained: frozenset[str]) -> list[GroupRow]:
    """Set requires_grad on every parameter by its group; return one row per group for a table."""
    sizes = {}
    for name, param in model.named_parameters():
        param.requires_grad_(param_groups[name] in trained)
        sizes[name] = param.numel()
    return count_groups(param_groups, sizes, trained)


def count_groups(param_groups: dict[str, str], sizes: dict[str, int], trained: frozenset[str]) -> list[GroupRow]:
    """One row per group: the sizes of its parameters (`sizes`, by name) summed, and whether `trained` has it."""
    counts = {g: 0 for g in GROUPS}
    for name, size in sizes.items():
        counts[param_groups[name]] += size
    return [GroupRow(g, counts[g], g in trained) for g in GROUPS]


def format_group_table(rows: list[GroupRow]) -> str:
    """The `fpt info` table: group, parameters, trained or frozen, percent of all parameters."""
    total = sum(r.params for r in rows) or 1
    trained = sum(r.params for r in rows if r.trained)
    lines = [f"{'group':<14} {'params':>14} {'state':<8} {'% of total':>10}"]
    for r in rows:
        state = "trained" if r.trained else "frozen"
        lines.append(f"{r.group:<14} {r.params:>14,} {state:<8} {100 * r.params / total:>9.3f}%")
    lines.append(f"{'total':<14} {total:>14,} {'':<8} {100.0:>9.3f}%")
    lines.append(f"{'trained':<14} {trained:>14,} {'':<8} {100 * trained / total:>9.3f}%")
    # the paper quotes the trained share without the position table (< 0.1% for GPT-2)
    no_positions = sum(r.params for r in rows if r.trained and r.group != "position")
    lines.append(f"{'  w/o pos.':<14} {no_positions:>14,} {'':<8} {100 * no_positions / total:>9.3f}%")
    return "\n".join(lines)
