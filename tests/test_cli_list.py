"""`make list`: one row per recipe, each column as wide as its longest cell, so a long variant list or a node-verified
status never pushes the columns after it out of line."""

from verl_recipes import catalog, cli


def test_every_row_starts_each_column_where_the_header_does(capsys):
    assert cli.main(["list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert [row.split()[0] for row in rows] == catalog.names()
    starts = [header.index(column) for column in ("versions", "variants", "status", "workload")]
    for row in rows:
        for start in starts:
            assert row[start - 1] == " " and row[start] != " ", row
