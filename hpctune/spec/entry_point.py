"""The user's training function named by ``[study] entry_point``: where it is, and loading it."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError


@dataclass(frozen=True)
class EntryPoint:
    """The user's training function.

    Attributes:
        file: The absolute path of a ``.py`` file (for ``"train.py:train"``), or ``None``.
        module: The module (for ``"package.module:train"``), or ``None``.
        function: The function's name in the file or module (dotted for attributes).
    """

    file: Path | None
    module: str | None
    function: str

    def describe(self) -> str:
        """Return the entry point as written, with the file's absolute path."""
        return f"{self.file if self.file is not None else self.module}:{self.function}"

    def code(self) -> bytes:
        """The training file's bytes (a module: its name), what stage sharing must match."""
        return self.file.read_bytes() if self.file is not None else str(self.module).encode()

    def load(self) -> Callable[..., Any]:
        """Import the file or module and return the function.

        A file is imported under a module name unique to its path, with its folder put on
        ``sys.path`` (so that it can import its neighbours); loading twice returns the same
        function.

        Raises:
            StudySpecError: The file or module is missing or fails to import, or the function
                is missing or not callable (``field`` is ``study.entry_point``).
        """
        module = self._import()
        obj: Any = module
        for part in self.function.split("."):
            if not hasattr(obj, part):
                names = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
                raise StudySpecError(
                    None,
                    "study.entry_point",
                    f"{self.describe()}: there is no `{self.function}` in "
                    f"{self.file or self.module}; callables defined there: "
                    f"{', '.join(names) or 'none'}",
                )
            obj = getattr(obj, part)
        if not callable(obj):
            raise StudySpecError(
                None,
                "study.entry_point",
                f"{self.describe()}: `{self.function}` must be a function, but it is a "
                f"{type(obj).__name__}",
            )
        return obj  # type: ignore[no-any-return]

    def _import(self) -> Any:
        if self.file is None:
            try:
                return importlib.import_module(str(self.module))
            except ImportError as exc:
                raise StudySpecError(
                    None,
                    "study.entry_point",
                    f"cannot import module {self.module!r} ({exc}); install its package or add "
                    "its folder to PYTHONPATH, or name a file instead (train.py:train)",
                ) from exc
            except Exception as exc:
                raise _import_failed(self.describe(), exc) from exc
        if not self.file.is_file():
            raise StudySpecError(None, "study.entry_point", f"the file {self.file} does not exist")
        digest = hashlib.sha1(str(self.file).encode("utf-8")).hexdigest()[:12]
        stem = re.sub(r"\W", "_", self.file.stem)
        name = f"hpctune_entry_{stem}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        folder = str(self.file.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(name, self.file)
        if spec is None or spec.loader is None:
            raise StudySpecError(
                None, "study.entry_point", f"{self.file} cannot be imported as a Python file"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise _import_failed(self.describe(), exc) from exc
        return module


def _import_failed(what: str, exc: Exception) -> StudySpecError:
    return StudySpecError(
        None,
        "study.entry_point",
        f"importing {what} failed with {type(exc).__name__}: {exc}; run it with "
        "`python -c 'import ...'` to see the traceback",
    )
