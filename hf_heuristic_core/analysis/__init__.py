"""Multi-seed analyses: `prune_many`, ablation tables, mask statistics, attention patterns and the `analyze` report.

One module per job: `units` (unit labels and the conversions between artifacts, units and masks by kind),
`results` (the runs folder's result files and tables), `prune_many` (pruning runs and their control subnetworks),
`ablation_table`, `mask_stats` (pure statistics on masks), `statistics` (the report's mask statistics),
`attention_patterns`, `report` (`analyze`) and `markdown` (report.md).
"""

from .ablation_table import AblationOptions, AblationRow, AblationTable, ablation_table
from .prune_many import datasets_from_spec, prune_many
from .results import CONTROL_KINDS, PruneManyResult, collect_results, read_json, summarize, write_json
from .units import (ablation_masks, group_label, parse_unit, run_name, sparsity_tag, unit_label,
                    units_from_masks)
from ..data.tokenize import tokenize_pairs

__all__ = [
    "AblationOptions", "AblationRow", "AblationTable", "CONTROL_KINDS", "PruneManyResult", "ablation_masks",
    "ablation_table", "collect_results", "datasets_from_spec", "group_label", "parse_unit", "prune_many",
    "read_json", "run_name", "sparsity_tag", "summarize", "tokenize_pairs", "unit_label", "units_from_masks",
    "write_json",
]
