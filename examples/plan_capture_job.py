"""A plain PySpark batch job with nothing of eventlog in it: orders joined with customers, revenue per country,
sorted. README's "Capture every operator of a query" runs it under ``spark-submit`` with the capture settings
``python -m connectors.spark.plan_capture LOG`` prints, and reads the plan back with ``replay plan``.

    eval spark-submit $(python -m connectors.spark.plan_capture /tmp/plan1 --operators all) examples/plan_capture_job.py
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    spark = SparkSession.builder.appName("plan-capture-example").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    orders = spark.range(0, 20_000, numPartitions=4).select(
        F.col("id").alias("order"), (F.col("id") % 500).alias("customer"), ((F.col("id") * 7) % 100).alias("amount"))
    customers = spark.range(0, 500, numPartitions=2).select(
        F.col("id").alias("customer"), F.element_at(F.array(*map(F.lit, ["DE", "FR", "JP", "US"])),
                                                     (F.col("id") % 4 + 1).cast("int")).alias("country"))
    revenue = (orders.join(customers, "customer").groupBy("country").agg(F.sum("amount").alias("revenue"))
               .orderBy(F.desc("revenue")))
    for row in revenue.collect():
        print(f"{row.country} {row.revenue}")
    spark.stop()


if __name__ == "__main__":
    main()
