"""Where logs live: ``files`` (local and ``pyarrow.fs``), ``memory`` (in-process)."""
