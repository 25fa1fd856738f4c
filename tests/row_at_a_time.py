"""The validator one row at a time, as it ran before blocks: the reference the block path
is held byte-identical to (tests) and the baseline it is measured against (benchmarks).
Not the product's path, so it lives here."""

from kfp_llmops.components.data_validation.candidates import line_kinds  # a benchmark patches it here


def begin(v, raw: bytes, line_no: int):
    """Everything up to the NER model for one line: decode, parse, schema, dedup,
    patterns; the row's scan, or raise the validator's rejection."""
    obj, fmt = v.parse(raw, v.lines.is_first(line_no))
    v._dedup(obj, fmt, line_no)
    return v._scan_patterns(obj, fmt, line_kinds(raw))


def check(v, raw: bytes, line_no: int) -> dict:
    """The clean record for one raw line, its names settled alone, or raise the rejection."""
    scan = begin(v, raw, line_no)
    spans = v.names.settle([scan.proposal])[0] if scan.proposal is not None else None
    return v.complete(scan, spans)
