//! `detail/settings.h`'s backoff doubles up to the longest pause and never past it. (Its defaults
//! are generated from `runtime::settings::DeviceSettings` into `detail/abi.h`.)

use runtime::settings::LONGEST_PAUSE_NS;

#[test]
fn a_backoff_doubles_to_its_longest_pause_and_stays_there() {
    for (first, longest) in [
        (32, 4096),
        (1, 1),
        (1, 1000),
        (3, 100),
        (64, LONGEST_PAUSE_NS),
    ] {
        let mut pause = first;
        let mut steps = 0;
        while pause < longest {
            let next = hostcheck::next_pause(pause, longest);
            assert!(
                next > pause && next <= longest,
                "{pause} -> {next} (longest {longest})"
            );
            assert!(next == 2 * pause || next == longest, "{pause} -> {next}");
            pause = next;
            steps += 1;
            assert!(steps <= 32);
        }
        assert_eq!(pause, longest);
        assert_eq!(hostcheck::next_pause(longest, longest), longest);
    }
}
