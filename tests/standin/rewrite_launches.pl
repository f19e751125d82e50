#!/usr/bin/perl
# rewrite_launches.pl - for the host stand-in build (tests/README.md): turns
# every CUDA launch `kern<<<grid, block, shmem, stream>>>(args);` of a .cu
# file into pp_si_launch(grid, block, shmem, stream, "kern",
# [=]() { kern(args); }, args); (tests/standin/include/kernel_shim.h), keeping
# the line count so compiler messages point at the .cu file's lines. A launch
# the pattern does not take is an error, never left in place.
use strict;
use warnings;
local $/;
my $src = <STDIN>;
my $n = 0;
$src =~ s{(\w+)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;}{
    my ($k, $cfg, $args) = ($1, $2, $3);
    (my $flat = $args) =~ s/\n/ /g;
    (my $cfgflat = $cfg) =~ s/\n/ /g;
    my $nl = () = ($cfg . $args) =~ /\n/g;
    $n++;
    "pp_si_launch($cfgflat, \"$k\", [=]() { $k($flat); }, $flat);" . ("\n" x $nl)
}gse;
die "rewrite_launches.pl: a <<< launch was left\n" if $src =~ /<<</;
print "#line 1 \"$ARGV[0]\"\n" if @ARGV;
print $src;
