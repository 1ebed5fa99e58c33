package io.liveviews.spark;

import com.google.gson.Gson;
import com.google.gson.JsonObject;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

/**
 * What a pipeline version's writer needs to know, given by the Python side as one JSON object
 * (liveviews.pipeline.realtime.query): the store, the pipeline version's names, the change
 * topic's shard count and retention, each view's row limit and whether it is listable, and the
 * text of sink.lua, the one script that applies row changes in both modes.
 */
final class ChangeTopicConfig implements Serializable {
  private static final long serialVersionUID = 1L;

  final String url;
  /** The pipeline with its namespace ("profiles@v2"): the name of its batches and markers. */
  final String qualified;
  final String name;
  final String namespace;
  final int shards;
  final long retention;
  final String script;
  final Map<String, Integer> limits = new HashMap<>();
  final Map<String, Integer> listed = new HashMap<>();

  private ChangeTopicConfig(JsonObject o) {
    url = o.get("url").getAsString();
    name = o.get("name").getAsString();
    namespace = o.get("namespace").getAsString();
    qualified = name + namespace;
    shards = o.get("shards").getAsInt();
    retention = o.get("retention").getAsLong();
    script = o.get("script").getAsString();
    for (Map.Entry<String, com.google.gson.JsonElement> e : o.getAsJsonObject("views").entrySet()) {
      JsonObject view = e.getValue().getAsJsonObject();
      limits.put(e.getKey(), view.get("limit").getAsInt());
      listed.put(e.getKey(), view.get("listed").getAsInt());
    }
  }

  static ChangeTopicConfig parse(String json) {
    return new ChangeTopicConfig(new Gson().fromJson(json, JsonObject.class));
  }
}
