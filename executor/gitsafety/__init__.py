"""Git safety: a planted hook or config in the project never runs on the host.

One declarative surface, decided once a run (surface.py: `GitSurface`, each `Guard` a path,
its reason and its mechanism), enforced by the kernel's mounts and carried in the sandbox spec;
named backups behind it, each in its own room. The rooms:

- walk.py: the no-follow walk that finds every `.git` and bare repository in the tree;
- hostgit.py: what git on the host runs or reads as config, and why (hooks, hooksPath,
  includes, worktrees, `gitdir:` files), read as git reads it (executor/gitconfig.py);
- surface.py: the surface, its mechanisms and the list of backups;
- guard.py: one session's surface and the state its backups need;
- aftercheck.py: the after-session check (backup of a bind session);
- applycheck.py: what a copy's `apply` must never write (backup of a copy session).

The toolbox guard (executor/toolbox/guards/git.py) is the backup inside the
container; the rules both sides need are the toolbox's own leaves, imported here
(toolbox/gitshape.py, toolbox/nofollow.py). docs/SECURITY.md tells the whole story.
"""
