"""Many reproducers, many variants, many GPUs: `kerncap check` (a corpus as a regression
test), `kerncap sweep` (many Triton configs or cubins of one reproducer) and the fan-out
they share (one worker per GPU, compiles on CPU workers; Dask distributed when
installed, else a process per GPU). Exposed through kerncap.api."""
