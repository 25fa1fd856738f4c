"""The PII scan of a record: pattern findings in every string (extra and nested fields
too), the name candidates when names are on, then the run's policy: the density and
secret verdicts, and redaction. Counts per type are kept for the run's metrics.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kfp_llmops.components.common.conversation import ROLES
from kfp_llmops.components.common.errors import InputError

from . import pii
from .candidates import NONE, Kinds
from .config import DataValidationConfig, RecordFormat
from .names import Proposal
from .schema import Rejected, field_chars


@dataclass
class Scan:
    obj: dict
    fmt: RecordFormat
    scanned: Any = None
    strings: list[str] = field(default_factory=list)
    n_findings: int = 0
    secret_field: str | None = None
    proposal: Any = None  # names.Proposal when names are on


@dataclass
class Redaction:
    text: str
    findings: list


class PiiScan:
    """A run's PII policy over records, with what it found (`found`, `redacted` per
    type, `rows_with_pii`). `names`: the name finder (names on), or None."""

    def __init__(self, config: DataValidationConfig, names=None):
        policy = pii.POLICIES[config.pii.policy.value]
        self.redact_types = frozenset(config.pii.redact) if config.pii.redact is not None else policy.redact
        unknown = self.redact_types - set(pii.ALL_TYPES)
        if unknown:
            raise InputError(f"pii.redact: unknown PII type(s) {sorted(unknown)}; known: {', '.join(pii.ALL_TYPES)}")
        self.quarantine_secrets = (
            policy.quarantine_secrets if config.pii.quarantine_secrets is None else config.pii.quarantine_secrets
        )
        self.max_density = policy.max_density if config.pii.max_density is None else config.pii.max_density
        self.names = (names or name_finder(config)) if config.pii.names.enabled else None
        self.found: Counter[str] = Counter()
        self.redacted: Counter[str] = Counter()
        self.rows_with_pii = 0

    def scan(
        self, obj: dict, fmt: RecordFormat, kinds: Kinds, names: bool = True, proposal: Proposal | None = None
    ) -> Scan:
        """Pattern findings in every string of the record (extra and nested fields too),
        and the name candidates when names are on. `kinds`: the pattern families whose
        candidates the raw line holds (`candidates.line_kinds`); with none the record
        has no pattern finding, so its strings are only collected. Without `names` the
        line holds no name candidate (`candidates.NAMES`): the name finder is skipped.
        `proposal`: the name finder's, already made of these strings (`_names_first`)."""
        scan = Scan(obj, fmt)
        if all(type(v) is str for v in obj.values()):  # the common flat record
            if kinds != NONE:
                scan.scanned = {k: self._visit(v, k, scan, kinds) for k, v in obj.items()}
            else:
                scan.scanned = obj
                scan.strings.extend(obj.values())
        else:
            scan.scanned = self._visit(obj, "", scan, kinds)
        if self.names is not None:
            if proposal is None:
                proposal = self.names.propose(scan.strings) if names else Proposal(scan.strings, None, ())
            scan.proposal = proposal
        return scan

    def _visit(self, value: Any, path: str, scan: Scan, kinds: Kinds) -> Any:
        """`scan`' walk of one value (at `path`): its strings collected into
        `scan` and, unless `kinds` is NONE, scanned; a method, not a closure, so each
        record leaves no reference cycle for the garbage collector."""
        if isinstance(value, str):
            scan.strings.append(value)
            findings = pii.find_pii(value, kinds) if kinds != NONE else None
            if not findings:
                return value
            scan.n_findings += len(findings)
            for f in findings:
                self.found[f.type] += 1
                if f.type in pii.SECRET_TYPES and scan.secret_field is None:
                    scan.secret_field = path
            return Redaction(value, findings)
        if isinstance(value, dict):  # a turn's role is markup, never PII
            return {
                k: v if k == "role" and v in ROLES else self._visit(v, f"{path}.{k}" if path else k, scan, kinds)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._visit(v, f"{path}[{i}]", scan, kinds) for i, v in enumerate(value)]
        return value

    def conclude(self, scan: Scan, name_spans: list | None) -> tuple[dict, float, int]:
        """Merge the confirmed names, then the density and secret verdicts and redaction.

        PII density = findings per word of the whole record (pii.word_count), so one
        email in a sentence is fine while a dump of contacts is not.
        """
        scanned, n_findings = scan.scanned, scan.n_findings
        if name_spans and any(name_spans):
            scanned, added = self._merge_names(scan.strings, name_spans, scanned)
            n_findings += added
        density = 0.0
        if n_findings:
            self.rows_with_pii += 1
            density = n_findings / max(1, sum(pii.word_count(s) for s in scan.strings))
        if scan.secret_field is not None and self.quarantine_secrets:
            raise Rejected("secret", scan.secret_field, "secret found; policy quarantines secrets")
        if density > self.max_density:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(finding_types(scanned).items()))
            raise Rejected(
                "pii_density", None, f"PII density {density:.2f} > max_density {self.max_density:.2f} ({kinds})"
            )
        obj = scan.obj
        text_chars = sum(field_chars(obj.get(n)) for n in scan.fmt.fields)
        return (self._apply(scanned) if n_findings else obj), density, text_chars

    def _merge_names(self, strings: list[str], name_spans: list, scanned: Any) -> tuple[Any, int]:
        """Add the PERSON/ADDRESS findings to the scanned record; a span the pattern engine
        already claimed (an email holding a name) stays its."""
        by_text = {text: spans for text, spans in zip(strings, name_spans, strict=False) if spans}
        added = [0]
        return self._merge(scanned, by_text, added), added[0]

    def _merge(self, value: Any, by_text: dict, added: list[int]) -> Any:
        """`_merge_names` of one value, the count of names added into `added[0]` (a method,
        not a closure: no reference cycle per record)."""
        if isinstance(value, Redaction):
            extra = by_text.get(value.text, ())
            new = [f for f in extra if all(f.end <= k.start or f.start >= k.end for k in value.findings)]
            value.findings = sorted(value.findings + new, key=lambda f: f.start)
        elif isinstance(value, str):
            new = by_text.get(value)
            if not new:
                return value
            value = Redaction(value, list(new))
        elif isinstance(value, dict):
            return {k: self._merge(v, by_text, added) for k, v in value.items()}
        elif isinstance(value, list):
            return [self._merge(v, by_text, added) for v in value]
        else:
            return value
        for f in new:
            self.found[f.type] += 1
        added[0] += len(new)
        return value

    def _apply(self, value: Any) -> Any:
        if isinstance(value, Redaction):
            for f in value.findings:
                if f.type in self.redact_types:
                    self.redacted[f.type] += 1
            return pii.redact(value.text, value.findings, self.redact_types)
        if isinstance(value, dict):
            return {k: self._apply(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._apply(v) for v in value]
        return value


def name_finder(config: DataValidationConfig):
    """The PERSON/ADDRESS detector, its NER model verified before any row is read."""
    from .names import NameFinder
    from .ner import NerConfirmer, resolve

    cfg = config.pii.names
    path, root = resolve(cfg.ner_model, cfg.ner_sha256)
    return NameFinder(NerConfirmer(path, cfg.ner_batch_size, root), cfg.allow)


def finding_types(value: Any, counts: Counter | None = None) -> Counter:
    """Findings per PII type in a scanned record: what made a row too dense."""
    counts = Counter() if counts is None else counts
    if isinstance(value, Redaction):
        counts.update(f.type for f in value.findings)
    elif isinstance(value, dict):
        for v in value.values():
            finding_types(v, counts)
    elif isinstance(value, list):
        for v in value:
            finding_types(v, counts)
    return counts
