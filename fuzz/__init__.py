"""Structure-aware fuzzing of every GSN decoder and socket handler (issue 12, item 5).

    ./gsn fuzz --list
    ./gsn fuzz --minutes 5 [TARGET...]
    ./gsn fuzz --replay fuzz/crashes/<target>-<hash>.bin
"""
