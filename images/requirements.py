"""Print the requirements of the package and the extras named as arguments, from
pyproject.toml alone: the images install dependencies in a layer of their own, before
the source, so a change of source rebuilds seconds of layers, not the dependencies.

`--only NAME`: the one requirement every extra that names NAME agrees on (the train, eval
and deploy images install torch by itself first, in a layer they share)."""

import re
import sys
import tomllib

with open("pyproject.toml", "rb") as handle:
    project = tomllib.load(handle)["project"]
if sys.argv[1:2] == ["--only"]:
    name = sys.argv[2]
    found = {
        r
        for extra in project["optional-dependencies"].values()
        for r in extra
        if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] == name
    }
    if len(found) != 1:
        said = f"the extras disagree: {sorted(found)}" if found else "no extra names it"
        sys.exit(f"pyproject.toml: {name}: {said}")
    print(found.pop())
    sys.exit(0)
lines = list(project["dependencies"])
for extra in sys.argv[1:]:
    lines += [r for r in project["optional-dependencies"][extra] if not r.startswith(project["name"])]
print("\n".join(lines))
