"""Package discovery only (everything else is in pyproject.toml).

configs/ stays at the top of the repository and ships in the wheel as the
package `tgjax_configs`, so `tgjax train --config tiny` works from an
installed package; pyproject's `packages.find` cannot map a directory to
another package name, hence this file. reproduction/ ships the same way as
`tgjax_reproduction` (the claims and the project's records, read by
`tgjax reproduce` in an installed package).
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["tgjax", "tgjax.*"]) + ["tgjax_configs", "tgjax_reproduction"],
    package_dir={"tgjax_configs": "configs", "tgjax_reproduction": "reproduction"},
    package_data={"tgjax_configs": ["*.py"], "tgjax_reproduction": ["claims.json", "runs.jsonl"]},
)
