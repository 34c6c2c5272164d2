"""The capture side: running the app under the capture library (`run`), ranking its
kernels (`profile`) and extracting one dispatch into a reproducer (`extract`)."""
