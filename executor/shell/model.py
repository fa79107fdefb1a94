"""What the analysis finds: words, simple commands, the parts it cannot resolve, the whole."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Piece(Enum):
    """How much is known statically about one part of a word."""

    LITERAL = "literal"
    """The exact text."""
    VALUE = "value"
    """One word whose text is only known at run time (`"$x"`, `"$(cmd)"`)."""
    SPLIT = "split"
    """Any number of words with any text (unquoted `$x`, `$(cmd)`, `"$@"`)."""
    PATTERN = "pattern"
    """Any number of words, each starting with the literal text before it (globs, braces)."""


@dataclass(frozen=True)
class Word:
    """One word of a simple command."""

    text: str
    """The value bash passes when `literal`; else the word's source text."""
    literal: bool = True
    """The value is known statically: no expansion, substitution, glob or brace."""
    may_be_option: bool = False
    """At run time it could be, or split into, a word starting with `-`."""
    splits: bool = False
    """At run time it could become several words (unquoted `$x`, `"$@"`)."""


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command: a program and its arguments (assignments and redirections left out)."""

    text: str
    """Its source text."""
    words: tuple[Word, ...]
    shown: str = ""
    """Its source text as written, with the redirections that follow it (here-document bodies
    left out): what a person is told it runs."""

    @property
    def argv(self) -> tuple[str, ...]:
        """The words' values (source text for words only known at run time)."""
        return tuple(word.text for word in self.words)

    @property
    def program(self) -> str:
        """The basename of the program (`/bin/rm`, `\\rm`, `'rm'` are `rm`); "" if not literal."""
        if not self.words or not self.words[0].literal:
            return ""
        return self.words[0].text.rstrip("/").rsplit("/", 1)[-1]

    @property
    def literal(self) -> bool:
        """Every word is known statically."""
        return all(word.literal for word in self.words)


@dataclass(frozen=True)
class Unresolved:
    """A part of the command whose effect cannot be told statically."""

    text: str
    """The source text concerned."""
    why: str
    """What makes it unknowable, e.g. "eval runs its arguments as shell code"."""
    fix: str
    """How to write it so it can be checked."""


@dataclass(frozen=True)
class ShellAnalysis:
    """What a command line runs, as far as can be told without running it."""

    source: str
    """The command as given."""
    joined: str
    """The command with its line continuations joined (what was parsed)."""
    commands: tuple[SimpleCommand, ...] = ()
    """Every simple command anywhere in it, in source order."""
    unresolved: tuple[Unresolved, ...] = ()
    """Why (parts of) it cannot be resolved statically."""
    single: bool = False
    """One simple command and nothing else: no operators, assignments, redirections or
    substitutions."""

    @property
    def resolved(self) -> bool:
        """Everything it runs is known statically."""
        return not self.unresolved

    def as_dict(self) -> dict[str, object]:
        """Plain data (for `policy explain --json`)."""
        return {
            "commands": [
                {"text": c.text, "program": c.program, "argv": list(c.argv),
                 "runtime_words": [w.text for w in c.words if not w.literal]}
                for c in self.commands
            ],
            "unresolved": [{"text": u.text, "why": u.why, "fix": u.fix} for u in self.unresolved],
            "single": self.single,
            "line_continuations_joined": self.joined != self.source,
        }
