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
 * arrives, by the same sink.lua call the micro-batch sink makes, so a subscriber gets its delta
 * within milliseconds, and a value that did not change sends none. The calls are made by a
 * thread of the partition's own ({@link ChangeTopicQueue}): the changes that arrive while one is
 * answered go together in the next.
 *
 * <p>A query in Real-Time Mode replays its last epoch after a failure, from the epoch's start:
 * the changes it makes again were partly written already, and applied one by one they would
 * show a subscriber older values before the newer ones again. So a writer partition that finds
 * it started this epoch before (a set in the store per epoch, {@link ChangeTopicKeys#attempts})
 * keeps the epoch's changes, the last of each row only, and applies them when the epoch ends:
 * what the first attempt wrote then sends no delta, and the rest arrive once. The source ends
 * such an epoch once it has read the log as it was when the epoch started again
 * ({@link LogTailReader}), not when its interval is up. The frontier is
 * not the writer's: the driver advances it when Spark reports the epoch done (after every
 * writer closed), so it never covers a change not yet written.
 *
 * <p>Rows are (view, key, row, value, score) as liveviews.pipeline.declared.view_changes makes
 * them; a null value deletes the row.
 */
public final class ChangeTopicWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  /** Row changes per script call, at most (a group is never split). */
  private static final int CALL_OPS = 5000;

  private final String configJson;
  private transient ChangeTopicConfig config;
  private transient ChangeTopicStore store;
  private transient long epoch;
  /** Set when this partition runs its epoch again: changes wait for the epoch's end. */
  private transient Map<List<String>, Map<String, String[]>> kept;
  /** Otherwise: the changes taken and not yet written. */
  private transient ChangeTopicQueue queue;

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
    queue = kept == null
        ? new ChangeTopicQueue("change topic writer " + config.qualified + " " + partitionId,
            this::writeNow)
        : null;
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
    List<String> group = List.of(view, key);
    if (kept != null) {
      kept.computeIfAbsent(group, g -> new LinkedHashMap<>()).put(rowId, op);
    } else {
      queue.add(group, rowId, op);
    }
  }

  @Override
  public void close(Throwable error) {
    if (queue != null) {
      try {
        if (error == null) {
          queue.drain(); // the driver's frontier, after this close, must cover them
        }
      } finally {
        queue.stop(); // a failed epoch is replayed whole: what it did not write can wait
        queue = null;
      }
      return;
    }
    if (error != null || kept == null || kept.isEmpty()) {
      return; // a failed epoch is replayed whole; nothing kept needs writing now
    }
    List<Call> calls = calls(kept);
    store.run("writing epoch " + epoch + " again", jedis -> {
      Pipeline pipe = jedis.pipelined();
      for (Call call : calls) {
        // EVAL, not EVALSHA: a pipeline cannot load a script its store lost halfway; this
        // runs once per epoch replayed, where the script's text costs nothing that matters.
        pipe.eval(config.script, call.keys(), call.args());
      }
      pipe.sync();
      return null;
    });
    kept = null;
  }

  /** The queue's writes: one call per shard while a batch is small, as it is at low load. */
  private void writeNow(Map<List<String>, Map<String, String[]>> changes) {
    for (Call call : calls(changes)) {
      store.run("writing changes of epoch " + epoch,
          jedis -> store.apply(jedis, call.keys(), call.args()));
    }
  }

  /** sink.lua's keys and arguments for one call. */
  private record Call(List<String> keys, List<String> args) {}

  /** The calls that write {@code changes}: by shard, of about CALL_OPS row changes each. */
  private List<Call> calls(Map<List<String>, Map<String, String[]>> changes) {
    Map<Integer, List<List<String>>> byShard = new TreeMap<>();
    for (List<String> group : changes.keySet()) {
      byShard.computeIfAbsent(ChangeTopicKeys.shard(group.get(0), group.get(1), config.shards),
          s -> new ArrayList<>()).add(group);
    }
    List<Call> calls = new ArrayList<>();
    for (Map.Entry<Integer, List<List<String>>> e : byShard.entrySet()) {
      List<List<String>> call = new ArrayList<>();
      int size = 0;
      for (List<String> group : e.getValue()) {
        int ops = changes.get(group).size();
        if (size > 0 && size + ops > CALL_OPS) {
          calls.add(call(e.getKey(), call, changes));
          call = new ArrayList<>();
          size = 0;
        }
        call.add(group);
        size += ops;
      }
      if (!call.isEmpty()) {
        calls.add(call(e.getKey(), call, changes));
      }
    }
    return calls;
  }

  private Call call(int shard, List<List<String>> groups,
      Map<List<String>, Map<String, String[]>> changes) {
    List<String> keys = new ArrayList<>(header(shard));
    List<String> args = new ArrayList<>(arguments(groups.size()));
    for (List<String> group : groups) {
      addGroup(keys, args, shard, group.get(0), group.get(1), changes.get(group).values());
    }
    return new Call(keys, args);
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
