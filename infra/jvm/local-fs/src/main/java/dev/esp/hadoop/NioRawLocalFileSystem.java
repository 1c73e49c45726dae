package dev.esp.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system without a process per call.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} starts a
 * {@code chmod} process for every file and folder it creates and a {@code readlink} process for
 * every link status it reads (each rename of a streaming checkpoint's log file): ~30 processes of
 * ~5 ms in every micro-batch. This class sets permissions with {@code java.nio} (the same
 * {@code chmod} system call) and reads a path's link status with {@code java.nio}; everything else,
 * symlinks included, is Hadoop's own code.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  /** The nine rwx bits of {@code mode} as java.nio permissions. */
  static Set<PosixFilePermission> posixPermissions(short mode) {
    Set<PosixFilePermission> permissions = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        permissions.add(BITS[bit]);
      }
    }
    return permissions;
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    // The sticky bit has no java.nio name, and the native library is faster still: Hadoop's way then.
    if (NativeIO.isAvailable() || permission.getStickyBit()) {
      super.setPermission(p, permission);
      return;
    }
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posixPermissions(permission.toShort()));
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + p + " does not exist");
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    // Hadoop asks `readlink` first, and for a path that is no link returns its plain status.
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
