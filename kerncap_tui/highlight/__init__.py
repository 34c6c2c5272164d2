"""Syntax highlighting for CUDA C++ in the source editor. Textual ships no C++ grammar;
tree-sitter-cpp (when installed) plus cpp.scm adds one. Without it the editor still
works, unhighlighted."""

from __future__ import annotations

from pathlib import Path

LANGUAGES = {".cu": "cpp", ".cuh": "cpp", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".h": "cpp",
             ".hpp": "cpp", ".c": "cpp", ".py": "python", ".toml": "toml",
             ".md": "markdown", ".sh": "bash", ".yaml": "yaml", ".yml": "yaml"}
# No "json": Textual 8.2's json highlighting segfaults with tree-sitter 0.26 (build.json
# opened after a .cu file crashed the interpreter); JSON is shown plain.


def language_for(path: Path) -> str | None:
    return LANGUAGES.get(path.suffix.lower())


_CPP = None


def _cpp_language():
    """One Language object for the process: tree-sitter objects built repeatedly from the
    same grammar pointer crashed the interpreter at garbage collection."""
    global _CPP
    if _CPP is None:
        import tree_sitter_cpp
        from tree_sitter import Language

        _CPP = Language(tree_sitter_cpp.language())
    return _CPP


def register_cpp(text_area) -> bool:
    """Register "cpp" on a TextArea; False when tree-sitter-cpp is not installed."""
    try:
        language = _cpp_language()
    except ImportError:
        return False
    query = (Path(__file__).with_name("cpp.scm")).read_text()
    text_area.register_language("cpp", language, query)
    return True
