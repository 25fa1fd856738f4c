"""Python regexes as programs for the backtracking matcher in pii_rows.c.

The pattern's text is parsed here (the subset pii.py's patterns use, read as Python's `re`
reads it) and each construct becomes instructions that try alternatives in the order
Python's engine does (greedy repeats: one more first; lazy ones: one fewer; branches left
to right), so the first match found is `re`'s. It reads no CPython internals. Anything
outside the subset raises `Unsupported`, so a new pattern the matcher cannot follow is
caught when the program is built, and tests hold every construct's matches to `re`'s.
"""

from __future__ import annotations

import math
import re

CHAR, SPLIT, JMP, SAVE, MATCH, ASSERT, BACKREF, AT = range(8)
AT_BOUNDARY, AT_END, AT_END_STRING = range(3)  # pii_rows.c's AT kinds: \b, $, \Z
MAX_GROUP = 3  # the matcher keeps groups 0..3
_ALL = frozenset(range(128))
_DIGITS = frozenset(range(48, 58))
_WORD = _DIGITS | set(range(65, 91)) | set(range(97, 123)) | {95}
_SPACE = frozenset({9, 10, 11, 12, 13, 32})
_CLASSES = {"d": _DIGITS, "D": _ALL - _DIGITS, "w": _WORD, "W": _ALL - _WORD, "s": _SPACE, "S": _ALL - _SPACE}
_ESCAPES = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
_FLAGS = {"i": re.IGNORECASE, "s": re.DOTALL, "a": re.ASCII}
_COUNT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")


class Unsupported(ValueError):
    """A construct the C matcher does not follow."""


def _fold(chars) -> frozenset[int]:
    return frozenset(chars) | {ord(chr(c).swapcase()) for c in chars if chr(c).isalpha()}


# The parse: a sequence is a list of nodes, each a tuple whose first item says what it is:
# ("chars", set), ("group", number or None, seq), ("branch", [seq, ...]),
# ("repeat", low, high or None, greedy, seq), ("assert", negate, behind, seq),
# ("backref", number), ("at", kind). Character sets are ASCII, already case-folded.


class _Parser:
    """A recursive descent over the pattern text, as `re` reads it."""

    def __init__(self, text: str, flags: int) -> None:
        self.text, self.at, self.groups = text, 0, 0
        self.flags = flags | self._global_flags()
        if self.flags & re.MULTILINE:
            raise Unsupported(f"{text!r}: multi-line anchors")
        if self.flags & re.VERBOSE:
            raise Unsupported(f"{text!r}: verbose patterns")

    def _global_flags(self) -> int:
        m = re.match(r"\(\?([a-zA-Z]+)\)", self.text)
        if not m:
            return 0
        self.at = m.end()
        return self._letters(m.group(1))

    def _letters(self, letters: str) -> int:
        flags = 0
        for letter in letters:
            if letter == "m":
                flags |= re.MULTILINE
            elif letter in _FLAGS:
                flags |= _FLAGS[letter]
            else:
                raise Unsupported(f"flag {letter!r}")
        return flags

    def _peek(self, n: int = 1) -> str:
        return self.text[self.at : self.at + n]

    def _take(self, n: int = 1) -> str:
        got = self.text[self.at : self.at + n]
        self.at += n
        return got

    def parse(self) -> list:
        seq = self._alternatives(self.flags)
        if self.at != len(self.text):
            raise Unsupported(f"unbalanced ')' at {self.at}")
        return seq

    def _alternatives(self, flags: int) -> list:
        branches = [self._sequence(flags)]
        while self._peek() == "|":
            self._take()
            branches.append(self._sequence(flags))
        return branches[0] if len(branches) == 1 else [("branch", branches)]

    def _sequence(self, flags: int) -> list:
        seq: list = []
        while self.at < len(self.text) and self._peek() not in "|)":
            atom = self._atom(flags)
            seq.append(self._quantified(atom) if atom is not None else None)
        return [node for node in seq if node is not None]

    def _quantified(self, atom):
        c = self._peek()
        if c in ("*", "+", "?"):
            self._take()
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (m := _COUNT.match(self.text, self.at)) and m.group() != "{}":
            self.at = m.end()
            low = int(m.group(1) or 0)
            high = (int(m.group(3)) if m.group(3) else None) if m.group(2) else low
        else:
            return atom
        greedy = True
        if self._peek() == "?":
            self._take()
            greedy = False
        elif self._peek() == "+":
            raise Unsupported("possessive repeat")
        if atom[0] in ("at", "assert"):
            raise Unsupported("a repeated assertion")
        body = atom[2] if atom[0] == "group" and atom[1] is None else [atom]
        return ("repeat", low, high, greedy, body)

    def _atom(self, flags: int):
        c = self._take()
        if c == "(":
            return self._group(flags)
        if c == "[":
            return self._class(flags)
        if c == "\\":
            return self._escape(flags)
        if c == ".":
            return ("chars", _ALL if flags & re.DOTALL else _ALL - {10})
        if c == "$":
            return ("at", AT_END)
        if c == "^" or c in "*+?":
            raise Unsupported(f"{c!r} at {self.at - 1}")
        return self._literal(ord(c), flags)

    @staticmethod
    def _literal(code: int, flags: int):
        if code >= 128:
            raise Unsupported("a character outside ASCII")
        return ("chars", _fold({code}) if flags & re.IGNORECASE else frozenset({code}))

    def _group(self, flags: int):
        number, negate, behind, inner = None, None, False, flags
        if self._peek() == "?":
            self._take()
            lead = self._peek(3)
            if lead[:1] in ("=", "!"):
                negate = self._take() == "!"
            elif lead[:2] in ("<=", "<!"):
                behind, negate = True, self._take(2) == "<!"
            elif lead[:2] == "P<":
                self.at = self.text.index(">", self.at) + 1
                number = self._open()
            else:
                m = re.compile(r"([a-zA-Z]*)(?:-([a-zA-Z]+))?:").match(self.text, self.at)
                if not m:
                    raise Unsupported(f"'(?{lead}' at {self.at - 2}")
                self.at = m.end()
                inner = (flags | self._letters(m.group(1))) & ~self._letters(m.group(2) or "")
        else:
            number = self._open()
        seq = self._alternatives(inner)
        if self._take() != ")":
            raise Unsupported("a group left open")
        if negate is None:
            return ("group", number, seq)
        if behind:
            low, high = _width(seq)
            if low != high:
                raise Unsupported("variable-width lookbehind")
        return ("assert", negate, behind, seq)

    def _open(self) -> int:
        self.groups += 1
        if self.groups > MAX_GROUP:
            raise Unsupported(f"group {self.groups}")
        return self.groups

    def _escape(self, flags: int):
        c = self._take()
        if c in _CLASSES:
            return ("chars", _fold(_CLASSES[c]) if flags & re.IGNORECASE else _CLASSES[c])
        if c == "b":
            return ("at", AT_BOUNDARY)
        if c == "Z":
            return ("at", AT_END_STRING)
        if c in "123456789" and not self._peek().isdigit():
            if flags & re.IGNORECASE:
                raise Unsupported("case-insensitive backreference")
            return ("backref", int(c))
        return self._literal(self._escaped_char(c), flags)

    def _escaped_char(self, c: str) -> int:
        if c in _ESCAPES:
            return _ESCAPES[c]
        if c == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", self._peek(2)):
            return int(self._take(2), 16)
        if c and c.isascii() and not c.isalnum():
            return ord(c)
        raise Unsupported(f"'\\{c}' at {self.at - 2}")

    def _class(self, flags: int):
        negate = self._peek() == "^"
        if negate:
            self._take()
        chars: set[int] = set()
        first = True
        while first or self._peek() != "]":
            if not self._peek():
                raise Unsupported("a class left open")
            first = False
            low = self._class_item()
            if self._peek() == "-" and self._peek(2) not in ("-]", "-"):
                self._take()
                high = self._class_item()
                if isinstance(low, frozenset) or isinstance(high, frozenset):
                    raise Unsupported("a range over a class")
                chars |= set(range(low, high + 1))
            else:
                chars |= low if isinstance(low, frozenset) else {low}
        self._take()
        if any(c >= 128 for c in chars):
            raise Unsupported("a character outside ASCII")
        chars = _fold(chars) if flags & re.IGNORECASE else frozenset(chars)
        return ("chars", _ALL - chars if negate else chars)

    def _class_item(self):
        """A character's code, or the set a class escape (\\d, \\w, \\s, ...) stands for."""
        c = self._take()
        if c != "\\":
            return ord(c)
        c = self._take()
        if c in _CLASSES:
            return _CLASSES[c]
        return 8 if c == "b" else self._escaped_char(c)


def _width(seq) -> tuple[float, float]:
    """The fewest and most characters `seq` can match (a backreference: any number)."""
    low = high = 0.0
    for node in seq:
        kind = node[0]
        if kind == "chars":
            a = b = 1.0
        elif kind == "group":
            a, b = _width(node[2])
        elif kind == "branch":
            widths = [_width(s) for s in node[1]]
            a, b = min(w[0] for w in widths), max(w[1] for w in widths)
        elif kind == "repeat":
            a, b = _width(node[4])
            a, b = a * node[1], (math.inf if node[2] is None else b * node[2])
        elif kind == "backref":
            a, b = 0.0, math.inf
        else:  # at, assert
            a = b = 0.0
        low, high = low + a, high + b
    return low, high


def parse(pattern: re.Pattern) -> list:
    """`pattern`'s parse (the node tuples above); ASCII matching required."""
    if not pattern.flags & re.ASCII:
        raise Unsupported(f"{pattern.pattern!r}: ASCII matching only")
    if not isinstance(pattern.pattern, str):
        raise Unsupported("a bytes pattern")
    return _Parser(pattern.pattern, pattern.flags & ~re.UNICODE).parse()


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
        seq = parse(pattern)
        entry = len(self.code)
        self._emit(seq)
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

    def _emit(self, seq) -> None:
        for node in seq:
            kind = node[0]
            if kind == "chars":
                self.code += [CHAR, self._set(node[1])]
            elif kind == "group":
                if node[1] is not None:
                    self.code += [SAVE, 2 * node[1]]
                self._emit(node[2])
                if node[1] is not None:
                    self.code += [SAVE, 2 * node[1] + 1]
            elif kind == "branch":
                self._branch(node[1])
            elif kind == "repeat":
                self._repeat(*node[1:])
            elif kind == "assert":
                _, negate, behind, sub = node
                at = len(self.code)
                self.code += [ASSERT, int(negate), int(_width(sub)[0]) if behind else -1, at + 5, 0]
                self._emit(sub)
                self.code.append(MATCH)
                self.code[at + 4] = len(self.code)
            elif kind == "backref":
                self.code += [BACKREF, node[1]]
            else:  # at
                self.code += [AT, node[1]]

    def _branch(self, alternatives) -> None:
        jumps = []
        for k, alternative in enumerate(alternatives):
            if k < len(alternatives) - 1:
                split = len(self.code)
                self.code += [SPLIT, split + 3, 0]
                self._emit(alternative)
                jumps.append(len(self.code))
                self.code += [JMP, 0]
                self.code[split + 2] = len(self.code)
            else:
                self._emit(alternative)
        for at in jumps:
            self.code[at + 1] = len(self.code)

    def _repeat(self, low: int, high: int | None, greedy: bool, sub) -> None:
        if _width(sub)[0] == 0 and not (len(sub) == 1 and sub[0][0] == "chars"):
            raise Unsupported("a repeat whose body can match nothing")
        for _ in range(low):
            self._emit(sub)
        if high is None:
            loop = len(self.code)
            self.code += [SPLIT, 0, 0]
            self._emit(sub)
            self.code += [JMP, loop]
            body, out = loop + 3, len(self.code)
            self.code[loop + 1 : loop + 3] = [body, out] if greedy else [out, body]
            return
        splits = []
        for _ in range(high - low):
            splits.append(len(self.code))
            self.code += [SPLIT, len(self.code) + 3, 0]
            self._emit(sub)
        out = len(self.code)
        for at in splits:
            self.code[at + 1 : at + 3] = [at + 3, out] if greedy else [out, at + 3]
