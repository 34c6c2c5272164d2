# A package, so these modules never clash with CPU test modules of the same basename.
