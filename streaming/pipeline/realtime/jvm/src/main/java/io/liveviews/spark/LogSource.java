package io.liveviews.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The log as a Structured Streaming source on the JVM:
 * {@code spark.readStream.format("io.liveviews.spark.LogSource").option("url", ...).load()}.
 *
 * <p>It reads what the Python source ({@code liveviews.pipeline.source}) reads, with the same
 * offsets, so a checkpoint moves between the two; unlike it, it also reads in Spark's Real-Time
 * Mode, where no Python data source runs. Options: {@code url}, {@code partitions} (4),
 * {@code maxEventsPerBatch} (100000) and {@code readers} (1, Real-Time Mode's tasks).
 */
public final class LogSource implements TableProvider, DataSourceRegister {
  /** {@code EVENT_SCHEMA} of {@code liveviews.pipeline.views}: one row per event. */
  static final StructType SCHEMA = new StructType()
      .add("partition", DataTypes.IntegerType, false)
      .add("offset", DataTypes.StringType, false)
      .add("type", DataTypes.StringType, true)
      .add("key", DataTypes.StringType, true)
      .add("payload", DataTypes.StringType, true)
      .add("event_time_ms", DataTypes.LongType, true)
      .add("ingest_time_ms", DataTypes.LongType, true);

  @Override
  public String shortName() {
    return "liveviews-log-jvm";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LogTable(LogOptions.from(new CaseInsensitiveStringMap(properties)));
  }
}
