"""Executors: where a generation's tasks run. ``local`` runs each operator instance as a thread of the driver;
``spark`` runs each as a task of one barrier-mode Spark job (``spark_daemon``: an optional PySpark worker daemon
that imports the runtime once, before it forks the workers)."""
