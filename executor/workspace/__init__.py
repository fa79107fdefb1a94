"""Workspaces: how the project reaches the sandbox, and how its changes come back.

    bind   the root is bind-mounted; changes land as they happen. Writes of write_file and
           edit_file keep their before-content (through the toolbox) so `undo` can restore
           them; files shell commands changed have before/after hashes only (journal.py).
    copy   the root is copied into the container at session start (archive.py); the host
           tree is not touched during the run. At the end the sandbox's tree is compared
           with the base recorded at copy time and the differences are kept, validated, as
           pending changes in the state dir (changes.py, store.py); `diff` shows them
           (render.py), `apply` writes them into the tree and `undo` takes them back
           (apply.py, through hostfs.py: dir fds, no link followed, atomic per file).

Everything the sandbox sends back is hostile data: every path, mode, link target and size is
checked before it is stored, and again before it is written (paths.py, risk.py).
"""
