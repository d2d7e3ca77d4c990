"""The allocation trace file (DESIGN.md section 5): its writer, the prefix tree's records,
and its reader, which declares the record format and refuses a file no run could write."""
