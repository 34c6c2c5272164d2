"""kerncap workbench: a Textual TUI over the kerncap engine (profile → extract → edit → replay → validate)."""
