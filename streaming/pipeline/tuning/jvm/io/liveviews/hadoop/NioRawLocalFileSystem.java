package io.liveviews.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system, setting permissions through Java NIO.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem} sets a new file's permissions
 * by starting a {@code chmod} process. Spark creates several checkpoint files per micro-batch
 * (offset log, commit log, state changelogs, and a checksum file beside each), so the driver
 * started a process for each of them. This class sets the same permission bits in-process.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(bits, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(bits, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(bits, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), bits);
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission);  // not a POSIX file system: Hadoop's own way
    }
  }

  private static void add(Set<PosixFilePermission> bits, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }
}
