package io.liveviews.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system ({@code file:}) over {@link NioRawLocalFileSystem}.
 * It is a {@link LocalFileSystem}, as {@code FileSystem.getLocal} and Spark's RocksDB state
 * store require.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
