"""Python regexes as programs for the backtracking matcher in pii_rows.c.

The program is compiled from Python's own parse of the pattern (`re._parser`), so the
C side never reads regex syntax: each construct becomes instructions that try
alternatives in the order Python's engine does (greedy repeats: one more first; lazy
ones: one fewer; branches left to right), and the first match found is `re`'s. Only what
pii.py's patterns use is supported, over ASCII text; anything else raises `Unsupported`,
so a new pattern the matcher cannot follow is caught when the program is built.
"""

from __future__ import annotations

import re
import re._constants as C
import re._parser as P

CHAR, SPLIT, JMP, SAVE, MATCH, ASSERT, BACKREF, AT = range(8)
_AT = {C.AT_BOUNDARY: 0, C.AT_END: 1, C.AT_END_STRING: 2}
MAX_GROUP = 3  # the matcher keeps groups 0..3
_DIGITS = set(range(48, 58))
_WORD = _DIGITS | set(range(65, 91)) | set(range(97, 123)) | {95}
_CATEGORIES = {
    C.CATEGORY_DIGIT: _DIGITS,
    C.CATEGORY_NOT_DIGIT: set(range(128)) - _DIGITS,
    C.CATEGORY_WORD: _WORD,
    C.CATEGORY_NOT_WORD: set(range(128)) - _WORD,
    C.CATEGORY_SPACE: {9, 10, 11, 12, 13, 32},
    C.CATEGORY_NOT_SPACE: set(range(128)) - {9, 10, 11, 12, 13, 32},
}


class Unsupported(ValueError):
    """A construct the C matcher does not follow."""


def _fold(chars: set[int]) -> set[int]:
    return chars | {ord(chr(c).swapcase()) for c in chars if chr(c).isalpha()}


class Program:
    """Several patterns in one instruction array (int32) with one table of character
    sets (16-byte ASCII bitmaps); `entries` are their first instructions."""

    def __init__(self) -> None:
        self.code: list[int] = []
        self.sets: list[bytes] = []
        self._set_ids: dict[bytes, int] = {}
        self.entries: list[int] = []
        self.firsts: list[int] = []  # per entry: the set its matches start with, -1: any

    def add(self, pattern: re.Pattern) -> int:
        """Compile `pattern` (ASCII flag required) and return its entry."""
        if not pattern.flags & re.ASCII:
            raise Unsupported(f"{pattern.pattern!r}: ASCII matching only")
        parsed = P.parse(pattern.pattern, pattern.flags)
        if parsed.state.flags & re.MULTILINE:
            raise Unsupported(f"{pattern.pattern!r}: multi-line anchors")
        entry = len(self.code)
        self._emit(parsed, parsed.state.flags)
        self.code.append(MATCH)
        self.entries.append(entry)
        self.firsts.append(self._first(entry))
        return entry

    def _first(self, pc: int) -> int:
        """The set of characters every match of the program at `pc` starts with (the
        matcher skips other start positions), or -1 when a match may consume nothing
        first (every position is tried). Zero-width steps are looked through."""
        bits, seen, todo = bytearray(16), set(), [pc]
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op = self.code[pc]
            if op == CHAR:
                for i, byte in enumerate(self.sets[self.code[pc + 1]]):
                    bits[i] |= byte
            elif op == SPLIT:
                todo += [self.code[pc + 1], self.code[pc + 2]]
            elif op == JMP:
                todo.append(self.code[pc + 1])
            elif op in (SAVE, AT):
                todo.append(pc + 2)
            elif op == ASSERT:
                todo.append(self.code[pc + 4])
            else:  # MATCH (an empty match) or BACKREF
                return -1
        return self._set({c for c in range(128) if bits[c >> 3] >> (c & 7) & 1})

    def _set(self, chars: set[int]) -> int:
        bits = bytearray(16)
        for c in chars:
            if c < 128:
                bits[c >> 3] |= 1 << (c & 7)
        key = bytes(bits)
        if key not in self._set_ids:
            self._set_ids[key] = len(self.sets)
            self.sets.append(key)
        return self._set_ids[key]

    def _char(self, chars: set[int], flags: int) -> None:
        self.code += [CHAR, self._set(_fold(chars) if flags & re.IGNORECASE else chars)]

    def _emit(self, items, flags: int) -> None:
        for op, av in items:
            if op is C.LITERAL:
                self._char({av}, flags)
            elif op is C.NOT_LITERAL:
                self._char(set(range(128)) - ({av} if not flags & re.I else _fold({av})), 0)
            elif op is C.ANY:
                self._char(set(range(128)) - (set() if flags & re.DOTALL else {10}), 0)
            elif op is C.IN:
                self._in(av, flags)
            elif op is C.BRANCH:
                self._branch(av[1], flags)
            elif op is C.SUBPATTERN:
                group, add_flags, del_flags, sub = av
                inner = (flags | add_flags) & ~del_flags
                if group is not None:
                    if group > MAX_GROUP:
                        raise Unsupported(f"group {group}")
                    self.code += [SAVE, 2 * group]
                self._emit(sub, inner)
                if group is not None:
                    self.code += [SAVE, 2 * group + 1]
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
                self._repeat(*av, greedy=op is C.MAX_REPEAT, flags=flags)
            elif op in (C.ASSERT, C.ASSERT_NOT):
                direction, sub = av
                width = -1
                if direction < 0:
                    low, high = sub.getwidth()
                    if low != high:
                        raise Unsupported("variable-width lookbehind")
                    width = low
                at = len(self.code)
                self.code += [ASSERT, int(op is C.ASSERT_NOT), width, at + 5, 0]
                self._emit(sub, flags)
                self.code.append(MATCH)
                self.code[at + 4] = len(self.code)
            elif op is C.GROUPREF:
                if flags & re.IGNORECASE:
                    raise Unsupported("case-insensitive backreference")
                self.code += [BACKREF, av]
            elif op is C.AT:
                if av not in _AT:
                    raise Unsupported(str(av))
                self.code += [AT, _AT[av]]
            else:
                raise Unsupported(str(op))

    def _in(self, items, flags: int) -> None:
        chars: set[int] = set()
        negate = False
        for op, av in items:
            if op is C.NEGATE:
                negate = True
            elif op is C.LITERAL:
                chars.add(av)
            elif op is C.RANGE:
                chars |= set(range(av[0], av[1] + 1))
            elif op is C.CATEGORY and av in _CATEGORIES:
                chars |= _CATEGORIES[av]
            else:
                raise Unsupported(f"{op} {av}")
        if flags & re.IGNORECASE:
            chars = _fold(chars)
        self._char(set(range(128)) - chars if negate else chars, 0)

    def _branch(self, alternatives, flags: int) -> None:
        jumps = []
        for k, alternative in enumerate(alternatives):
            if k < len(alternatives) - 1:
                split = len(self.code)
                self.code += [SPLIT, split + 3, 0]
                self._emit(alternative, flags)
                jumps.append(len(self.code))
                self.code += [JMP, 0]
                self.code[split + 2] = len(self.code)
            else:
                self._emit(alternative, flags)
        for at in jumps:
            self.code[at + 1] = len(self.code)

    def _repeat(self, low: int, high, sub, greedy: bool, flags: int) -> None:
        if sub.getwidth()[0] == 0 and not _single(sub):
            raise Unsupported("a repeat whose body can match nothing")
        for _ in range(low):
            self._emit(sub, flags)
        if high is C.MAXREPEAT:
            loop = len(self.code)
            self.code += [SPLIT, 0, 0]
            self._emit(sub, flags)
            self.code += [JMP, loop]
            body, out = loop + 3, len(self.code)
            self.code[loop + 1 : loop + 3] = [body, out] if greedy else [out, body]
            return
        splits = []
        for _ in range(high - low):
            splits.append(len(self.code))
            self.code += [SPLIT, len(self.code) + 3, 0]
            self._emit(sub, flags)
        out = len(self.code)
        for at in splits:
            self.code[at + 1 : at + 3] = [at + 3, out] if greedy else [out, at + 3]


def _single(sub) -> bool:
    return len(sub) == 1 and sub[0][0] in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN)
