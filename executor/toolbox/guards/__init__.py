"""What a command did is checked, and undone where git on the host would run it: the git guard
before a command (checks), and after it the protected mounts put back, set-id bits cleared
(setid), new repositories disabled (git) and the disk budget (disk)."""
