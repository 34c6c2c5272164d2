"""Infrastructure every layer may use: units and formatting, the dtype table, where the
native parts live. Imports nothing from kerncap but `kerncap.errors`."""
