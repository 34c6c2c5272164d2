"""Front ends other than the command line and the workbench (they use kerncap.api only)."""
