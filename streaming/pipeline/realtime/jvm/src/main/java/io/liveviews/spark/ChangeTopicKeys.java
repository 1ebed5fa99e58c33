package io.liveviews.spark;

import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32;

/**
 * The change topic's key names, as liveviews.changes.topic names them: a (view, key) lives in
 * shard crc32("view/key") % shards, and everything of a shard shares the hash tag {c<shard>}.
 */
final class ChangeTopicKeys {
  private ChangeTopicKeys() {}

  static int shard(String view, String key, int shards) {
    CRC32 crc = new CRC32();
    crc.update((view + "/" + key).getBytes(StandardCharsets.UTF_8));
    return (int) (crc.getValue() % shards);
  }

  private static String tag(int shard) {
    return "lv:{c" + shard + "}";
  }

  static String changes(int shard) {
    return tag(shard) + ":changes";
  }

  static String batches(int shard) {
    return tag(shard) + ":batches";
  }

  static String positions(int shard) {
    return tag(shard) + ":pos";
  }

  static String live(int shard) {
    return tag(shard) + ":live";
  }

  static String rows(int shard, String view, String key) {
    return tag(shard) + ":rows:" + view + "/" + key;
  }

  static String candidates(int shard, String view, String key) {
    return tag(shard) + ":cand:" + view + "/" + key;
  }

  static String rank(int shard, String view, String key) {
    return tag(shard) + ":rank:" + view + "/" + key;
  }

  static String index(int shard, String view) {
    return tag(shard) + ":keys:" + view + "/";
  }

  /**
   * The set of the writer partitions that started an epoch of a pipeline version: a partition
   * that finds itself there already runs the epoch again after a failure.
   */
  static String attempts(String qualified, long epoch) {
    return "lv:{m}:realtime:" + qualified + ":" + epoch;
  }
}
