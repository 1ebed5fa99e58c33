package io.liveviews.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import redis.clients.jedis.Pipeline;

/**
 * The change topic's writer for a query in Real-Time Mode: each row change is applied as it
 * arrives, by the same sink.lua call the micro-batch sink makes (one group, one change), so a
 * subscriber gets its delta within milliseconds, and a value that did not change sends none.
 *
 * <p>A query in Real-Time Mode replays its last epoch after a failure, from the epoch's start:
 * the changes it makes again were partly written already, and applied one by one they would
 * show a subscriber older values before the newer ones again. So a writer partition that finds
 * it started this epoch before (a set in the store per epoch, {@link ChangeTopicKeys#attempts})
 * keeps the epoch's changes, the last of each row only, and applies them when the epoch ends:
 * what the first attempt wrote then sends no delta, and the rest arrive once. The frontier is
 * not the writer's: the driver advances it when Spark reports the epoch done (after every
 * writer closed), so it never covers a change not yet written.
 *
 * <p>Rows are (view, key, row, value, score) as liveviews.pipeline.declared.view_changes makes
 * them; a null value deletes the row.
 */
public final class ChangeTopicWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  /** Row changes per script call when an epoch's kept changes are applied at its end. */
  private static final int CALL_OPS = 5000;

  private final String configJson;
  private transient ChangeTopicConfig config;
  private transient ChangeTopicStore store;
  private transient long epoch;
  /** Set when this partition runs its epoch again: changes wait for the epoch's end. */
  private transient Map<List<String>, Map<String, String[]>> kept;

  public ChangeTopicWriter(String configJson) {
    this.configJson = configJson;
    ChangeTopicConfig.parse(configJson); // a malformed configuration fails on the driver
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    config = ChangeTopicConfig.parse(configJson);
    store = new ChangeTopicStore(config.url, config.script);
    epoch = epochId;
    String marker = ChangeTopicKeys.attempts(config.qualified, epochId);
    long added = store.run("starting epoch " + epochId,
        jedis -> jedis.sadd(marker, Long.toString(partitionId)));
    kept = added == 0 ? new LinkedHashMap<>() : null;
    return true;
  }

  @Override
  public void process(Row row) {
    String view = row.getString(0);
    String key = row.getString(1);
    String rowId = row.getString(2);
    String value = row.isNullAt(3) ? null : row.getString(3);
    double score = row.isNullAt(4) ? 0.0 : row.getDouble(4);
    if (!config.limits.containsKey(view)) {
      throw new IllegalArgumentException("a pipeline wrote to undeclared view '" + view + "'.");
    }
    String[] op = {value == null ? "d" : "u", rowId, value == null ? "" : value,
        Double.toString(score)};
    if (kept != null) {
      kept.computeIfAbsent(List.of(view, key), g -> new LinkedHashMap<>()).put(rowId, op);
      return;
    }
    int shard = ChangeTopicKeys.shard(view, key, config.shards);
    List<String> keys = new ArrayList<>(header(shard));
    List<String> args = new ArrayList<>(arguments(1));
    addGroup(keys, args, shard, view, key, List.<String[]>of(op));
    store.run("writing a change of " + view + "/" + key, jedis -> store.apply(jedis, keys, args));
  }

  @Override
  public void close(Throwable error) {
    if (error != null || kept == null || kept.isEmpty()) {
      return; // a failed epoch is replayed whole; nothing kept needs writing now
    }
    Map<Integer, List<List<String>>> byShard = new TreeMap<>();
    for (List<String> group : kept.keySet()) {
      byShard.computeIfAbsent(ChangeTopicKeys.shard(group.get(0), group.get(1), config.shards),
          s -> new ArrayList<>()).add(group);
    }
    store.run("writing epoch " + epoch + " again", jedis -> {
      Pipeline pipe = jedis.pipelined();
      for (Map.Entry<Integer, List<List<String>>> e : byShard.entrySet()) {
        queueShard(pipe, e.getKey(), e.getValue());
      }
      pipe.sync();
      return null;
    });
    kept = null;
  }

  /** One shard's kept groups, in calls of about CALL_OPS changes; a group is never split. */
  private void queueShard(Pipeline pipe, int shard, List<List<String>> groups) {
    List<List<String>> call = new ArrayList<>();
    int size = 0;
    for (List<String> group : groups) {
      int ops = kept.get(group).size();
      if (size > 0 && size + ops > CALL_OPS) {
        queueCall(pipe, shard, call);
        call = new ArrayList<>();
        size = 0;
      }
      call.add(group);
      size += ops;
    }
    if (!call.isEmpty()) {
      queueCall(pipe, shard, call);
    }
  }

  private void queueCall(Pipeline pipe, int shard, List<List<String>> groups) {
    List<String> keys = new ArrayList<>(header(shard));
    List<String> args = new ArrayList<>(arguments(groups.size()));
    for (List<String> group : groups) {
      addGroup(keys, args, shard, group.get(0), group.get(1), kept.get(group).values());
    }
    // EVAL, not EVALSHA: a pipeline cannot load a script its store lost halfway; this runs
    // once per epoch replayed, where the script's text costs nothing that matters.
    pipe.eval(config.script, keys, args);
  }

  private List<String> header(int shard) {
    return List.of(ChangeTopicKeys.changes(shard), ChangeTopicKeys.batches(shard),
        ChangeTopicKeys.positions(shard), ChangeTopicKeys.live(shard));
  }

  /** sink.lua's arguments before the groups; never the final call, which records a batch. */
  private List<String> arguments(int groups) {
    return List.of(config.qualified, Long.toString(epoch), Long.toString(config.retention), "0",
        Integer.toString(groups), config.name, config.namespace);
  }

  private void addGroup(List<String> keys, List<String> args, int shard, String view, String key,
      Iterable<String[]> ops) {
    String name = view + config.namespace;
    keys.add(ChangeTopicKeys.rows(shard, name, key));
    keys.add(ChangeTopicKeys.candidates(shard, name, key));
    keys.add(ChangeTopicKeys.rank(shard, name, key));
    keys.add(ChangeTopicKeys.index(shard, name));
    int count = 0;
    List<String> flat = new ArrayList<>();
    for (String[] op : ops) {
      flat.add(op[0]);
      flat.add(op[1]);
      flat.add(op[2]);
      flat.add(op[3]);
      count++;
    }
    args.add(name);
    args.add(key);
    args.add(Integer.toString(config.limits.get(view)));
    args.add(Integer.toString(config.listed.get(view)));
    args.add(Integer.toString(count));
    args.addAll(flat);
  }
}
