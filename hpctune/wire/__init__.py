"""The wire between processes, files only: the worker protocol, event logs, atomic files, the
states, the study directory's layout, the inbox and ask/tell, the controller lease, private
permissions, storage faults and the clock. Kept free of heavy imports (workers use it)."""
