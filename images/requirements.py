"""Print the requirements of the package and the extras named as arguments, from
pyproject.toml alone: the images install dependencies in a layer of their own, before
the source, so a change of source rebuilds seconds of layers, not the dependencies."""

import sys
import tomllib

with open("pyproject.toml", "rb") as handle:
    project = tomllib.load(handle)["project"]
lines = list(project["dependencies"])
for extra in sys.argv[1:]:
    lines += [r for r in project["optional-dependencies"][extra] if not r.startswith(project["name"])]
print("\n".join(lines))
