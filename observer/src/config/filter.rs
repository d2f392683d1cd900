//! The device filter (`[devices]`, `--device`, `--exclude-device`) compiled for matching.

use super::Devices;

/// Device include/exclude filter, compiled from [`Devices`].
#[derive(Clone, Debug, Default)]
pub struct DeviceFilter {
    include: Vec<glob::Pattern>,
    exclude: Vec<glob::Pattern>,
}

impl DeviceFilter {
    /// Compiles the patterns (already validated).
    pub fn new(d: &Devices) -> Self {
        let compile = |v: &Vec<String>| {
            v.iter()
                .filter_map(|p| glob::Pattern::new(p).ok())
                .collect()
        };
        Self {
            include: compile(&d.include),
            exclude: compile(&d.exclude),
        }
    }

    /// Whether a device (kernel name) is exported.
    pub fn allows(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| p.matches(name)))
            && !self.exclude.iter().any(|p| p.matches(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter() {
        let f = DeviceFilter::new(&Devices {
            include: vec!["loop*".into(), "vda".into()],
            exclude: vec!["loop7".into()],
            ..Devices::default()
        });
        assert!(f.allows("loop0") && f.allows("vda"));
        assert!(!f.allows("loop7") && !f.allows("nvme0n1"));
        assert!(DeviceFilter::default().allows("anything"));
    }
}
