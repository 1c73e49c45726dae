package dev.esp.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * {@link LocalFileSystem} (checksummed) over {@link NioRawLocalFileSystem}: the class for
 * {@code fs.file.impl}, what Hadoop's FileSystem API opens for {@code file:} paths.
 */
public class NioLocalFileSystem extends LocalFileSystem {

  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
