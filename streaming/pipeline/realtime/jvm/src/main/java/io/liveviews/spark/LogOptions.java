package io.liveviews.spark;

import java.io.Serializable;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The source's options, parsed once on the driver. */
record LogOptions(String url, int partitions, long maxEventsPerBatch, int readers, String wants,
    String cuts, String pipeline, String version) implements Serializable {

  static LogOptions from(CaseInsensitiveStringMap options) {
    String url = options.get("url");
    if (url == null || url.isEmpty()) {
      throw new IllegalArgumentException("the log source needs the store's URL: option(\"url\", ...)");
    }
    return new LogOptions(url, positive(options, "partitions", 4),
        positive(options, "maxEventsPerBatch", 100_000), positive(options, "readers", 1),
        options.getOrDefault("wants", ""), options.getOrDefault("cuts", ""),
        options.getOrDefault("pipeline", ""), options.getOrDefault("version", ""));
  }

  private static int positive(CaseInsensitiveStringMap options, String name, int otherwise) {
    int value = options.getInt(name, otherwise);
    if (value < 1) {
      throw new IllegalArgumentException(
          "the log source's option " + name + " must be at least 1, not " + value);
    }
    return value;
  }
}
