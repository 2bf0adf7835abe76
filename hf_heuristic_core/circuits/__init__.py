"""Circuits: MIB-format export, faithfulness curves over circuit size, and an attribution baseline.

A node-level circuit of MIB's circuit-localization track (attention heads `a{l}.h{h}`, MLP blocks `m{l}`) is exactly
this package's unit masks. One module per job:

* `mib`: the circuit file format, written and read (`write_mib_circuit`, `read_mib_circuit`);
* `ranking`: MIB's circuit sizes and which units a circuit of a size keeps (`top_units`);
* `export`: an importance file plus binary circuits at MIB's submission sizes (`export_mib_circuits`);
* `metrics`, `batches`: the logit difference MIB scores with, and the batches it is computed on;
* `faithfulness`: f over circuit size with mean / zero / resample ablation, CPR and CMD (`faithfulness_curves`);
* `attribution`: node attribution patching and integrated gradients through the mask hooks (`attribution_scores`);
* `warm_start`: mask logits initialized from a ranking (`warm_start_logits`, `PruningArguments.warm_start_scores`);
* `sources`: rankings from MIB files or mask artifacts (`load_unit_scores`);
* `ioi`: an IOI-style template task generated offline (`generate_ioi`, `tokenize_ioi`);
* `report`: the circuit section of `analyze`'s report.

See docs/guides/circuits.md.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["MibCircuit", "MibConfig", "MibFormatError", "mib_config", "mib_document", "read_mib_circuit",
                     "write_mib_circuit"], "mib"),
    **dict.fromkeys(["MIB_CURVE_SIZES", "MIB_SUBMISSION_SIZES", "circuit_size", "random_scores", "top_units"],
                    "ranking"),
    "export_mib_circuits": "export",
    "logit_difference": "metrics",
    **dict.fromkeys(["CurveSettings", "FaithfulnessCurve", "area_under_curves", "faithfulness_curve",
                     "faithfulness_curves"], "faithfulness"),
    **dict.fromkeys(["AttributionResult", "attribution_scores", "differentiable_masks"], "attribution"),
    **dict.fromkeys(["warm_start_from_file", "warm_start_logits"], "warm_start"),
    "load_unit_scores": "sources",
    **dict.fromkeys(["generate_ioi", "tokenize_ioi"], "ioi"),
}

__all__ = sorted(_EXPORTS)


__getattr__, _ = lazy_exports(__name__, _EXPORTS)
