"""The Spark-hosted streaming runtime (operators over log channels)."""
