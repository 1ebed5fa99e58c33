package io.liveviews.spark;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The row changes a writer partition has taken and not yet written, written by a thread of its
 * own as they come: one change per store call while they come one at a time, and all that came
 * during the last call in the next one when they come faster. A writer that waited for the
 * store's answer to each change fell behind at 1,000 events/s on two cores, where a round trip
 * to a busy store takes a millisecond; this keeps the first change's latency and lets a burst
 * share a call.
 *
 * <p>Changes are kept by group (view, key), the last of each row only, and a row's changes are
 * written in the order they came: one thread writes, one batch after the other. A failed write
 * ends the queue: the next {@link #add} or {@link #drain} throws it, and the epoch is replayed.
 */
final class ChangeTopicQueue implements Runnable {
  /** Row changes held at most; a writer that gets further ahead of the store waits. */
  static final int MAX_PENDING = 20_000;
  private static final long STOP_WAIT_MS = ChangeTopicStore.OUTAGE_MS + 5_000;

  private final Object lock = new Object();
  private final Consumer<Map<List<String>, Map<String, String[]>>> write;
  private final Thread thread;
  private Map<List<String>, Map<String, String[]>> pending = new LinkedHashMap<>();
  private int pendingRows;
  private boolean writing;
  private boolean stopped;
  private RuntimeException failure;

  ChangeTopicQueue(String name, Consumer<Map<List<String>, Map<String, String[]>>> write) {
    this.write = write;
    this.thread = new Thread(this, name);
    thread.setDaemon(true);
    thread.start();
  }

  /** {@code op} for row {@code rowId} of {@code group}, written soon after. */
  void add(List<String> group, String rowId, String[] op) {
    synchronized (lock) {
      while (pendingRows >= MAX_PENDING && failure == null) {
        await();
      }
      check();
      if (pending.computeIfAbsent(group, g -> new LinkedHashMap<>()).put(rowId, op) == null) {
        pendingRows++;
      }
      lock.notifyAll();
    }
  }

  /** Until every change added so far is written; throws what a write failed with. */
  void drain() {
    synchronized (lock) {
      while ((writing || !pending.isEmpty()) && failure == null) {
        await();
      }
      check();
    }
  }

  /**
   * Ends the thread once its call in flight (if any) is answered; what was not written yet is
   * dropped, for an epoch that failed is replayed whole.
   */
  void stop() {
    synchronized (lock) {
      stopped = true;
      lock.notifyAll();
    }
    try {
      thread.join(STOP_WAIT_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void run() {
    while (true) {
      Map<List<String>, Map<String, String[]>> batch;
      synchronized (lock) {
        while (pending.isEmpty() && !stopped) {
          try {
            lock.wait();
          } catch (InterruptedException e) {
            return;
          }
        }
        if (stopped) {
          return;
        }
        batch = pending;
        pending = new LinkedHashMap<>();
        pendingRows = 0;
        writing = true;
        lock.notifyAll();
      }
      RuntimeException failed = null;
      try {
        write.accept(batch);
      } catch (RuntimeException e) {
        failed = e;
      } catch (Error e) {
        failed = new IllegalStateException("writing the change topic failed: " + e, e);
      }
      synchronized (lock) {
        writing = false;
        failure = failed;
        lock.notifyAll();
        if (failed != null) {
          return;
        }
      }
    }
  }

  private void check() {
    if (failure != null) {
      throw failure;
    }
  }

  private void await() {
    try {
      lock.wait();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while the change topic's writes were queued",
          e);
    }
  }
}
