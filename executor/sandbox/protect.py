"""The names this module held before git safety became one package (executor/gitsafety/).

Kept only so that code written against it (other branches of this wave, older tests) still
imports; new code imports from the package's rooms. Remove once nothing imports it.
"""

from executor.gitsafety.aftercheck import (
    Identity,
    Sweep,
    check_replaced,
    disable_git,
    identities,
    misplaced,
    sweep,
)
from executor.gitsafety.hostgit import GitPaths, Protected, git_paths, protected_paths
from executor.gitsafety.walk import TreeScan, scan

__all__ = ["GitPaths", "Identity", "Protected", "Sweep", "TreeScan", "check_replaced",
           "disable_git", "git_paths", "identities", "misplaced", "protected_paths", "scan",
           "sweep"]
