"""The validator one row at a time, as it ran before blocks: the reference the block path
is held byte-identical to (tests) and the baseline it is measured against (benchmarks).
Not the product's path, so it lives here."""

from kfp_llmops.components.data_validation.candidates import line_kinds  # a benchmark patches it here
from kfp_llmops.components.data_validation.dedup import fingerprint
from kfp_llmops.components.data_validation.schema import dedup_text


def begin(v, raw: bytes, line_no: int):
    """Everything up to the NER model for one line: decode, parse, schema, dedup,
    patterns; the row's scan, or raise the validator's rejection."""
    obj, fmt = v.schema.parse(raw, v.lines.is_first(line_no))
    dedup(v, obj, fmt, line_no)
    return v.pii.scan(obj, fmt, line_kinds(raw))


def dedup(v, obj: dict, fmt, line_no: int) -> None:
    """The row's text through the exact index, then the near one; raise if seen."""
    text = dedup_text(obj, fmt)
    if v.exact is not None:
        first = v.exact.add(fingerprint(text), line_no)
        if first is not None:
            raise v._duplicate_of(first)
    if v.near is not None:
        first = v.near.check(text, line_no)
        if first is not None:
            raise v._near_duplicate_of(first)


def check(v, raw: bytes, line_no: int) -> dict:
    """The clean record for one raw line, its names settled alone, or raise the rejection."""
    scan = begin(v, raw, line_no)
    spans = v.names.settle([scan.proposal])[0] if scan.proposal is not None else None
    return v.complete(scan, spans)
