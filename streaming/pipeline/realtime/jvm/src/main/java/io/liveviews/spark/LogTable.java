package io.liveviews.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The log as a table that is only read as a stream; its scan is the whole log, in every
 * column, so the table is its own scan builder and scan.
 */
final class LogTable implements SupportsRead, ScanBuilder, Scan {
  private final LogOptions options;

  LogTable(LogOptions options) {
    this.options = options;
  }

  @Override
  public String name() {
    return "liveviews-log";
  }

  @Override
  public StructType schema() {
    return LogSource.SCHEMA;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
    return this;
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return LogSource.SCHEMA;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new LogStream(options);
  }
}
